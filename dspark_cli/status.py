"""The one status every check reports, whatever it checks (preflight rules, smoke checks)."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    passed = "passed"
    failed = "failed"
    skipped = "skipped"  # does not apply to this configuration (or a dry run)
    not_run = "not_run"  # would apply, but an earlier failure ended the run first
