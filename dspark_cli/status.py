"""The one status every check reports, whatever it checks (preflight rules, smoke checks), and
the finding a preflight check returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dspark_cli.compat import StrEnum


class Status(StrEnum):
    passed = "passed"
    failed = "failed"
    skipped = "skipped"  # does not apply to this configuration (or a dry run)
    not_run = "not_run"  # would apply, but an earlier failure ended the run first


@dataclass(frozen=True)
class Finding:
    """One preflight check's verdict; `key` is the config key a user changes to fix it."""

    rule: str
    status: Status
    message: str
    key: str | None = None
    overridden: bool = False  # a check switched off on purpose by an explicit setting
    note: str | None = None  # a fact worth a line whatever the verdict (printed once)
    # False: skipped because the check does not apply to this configuration (no aiter MoE
    # backend, no DSpark draft), said only when asked (`-v`); a skip that applies is a check
    # that could not run here (a dry run, a checkpoint elsewhere)
    applies: bool = True

    @property
    def failed(self) -> bool:
        return self.status is Status.failed

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "status": self.status.value, "message": self.message,
                "key": self.key, "overridden": self.overridden, "note": self.note,
                "applies": self.applies}
