"""The `runtime-pins` preflight finding: the installed software (`launch/runtime.py`, read from
metadata) held against `runtime.expected.*`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspark_cli.launch.runtime import Runtime, installed
from dspark_cli.status import Finding, Status

RULE = "runtime-pins"
KEY = "runtime.expected"
MIN_COMMIT = 7  # hex digits: the shortest prefix git itself abbreviates a commit to


def matches(key: str, expected: str, actual: str | None) -> bool:
    """Commits match by prefix (a short hash pins as well as a full one, but no hash shorter
    than 7 digits matches anything); the rest exactly."""
    if actual is None:
        return False
    if key.endswith("_commit"):
        want, have = expected.lower(), actual.lower()
        if min(len(want), len(have)) < MIN_COMMIT:
            return False
        return have.startswith(want) or want.startswith(have)
    if key.endswith("sha256"):
        return expected.lower() == actual.lower()
    return expected == actual


def mismatches(expected: Mapping[str, Any], actual: Runtime) -> list[str]:
    """`key: expected X, found Y` for each pin (non-null) the runtime does not satisfy."""
    have = actual.to_dict()
    out = []
    for key, want in sorted(expected.items()):
        if want is None:
            continue
        if key not in have:
            raise KeyError(key)
        if not matches(key, str(want), have[key]):
            out.append(f"{key}: expected {want}, found {have[key] or 'nothing installed'}")
    return out


def finding(expected: Mapping[str, Any], dry_run: bool,
            actual: Runtime | None = None) -> Finding:
    """The `runtime-pins` preflight finding; a dry run plans for another machine and skips it."""
    pinned = sorted(k for k, v in expected.items() if v is not None)
    if not pinned:
        return Finding(RULE, Status.passed, "no runtime pins set", KEY)
    if dry_run:
        return Finding(RULE, Status.skipped,
                       f"runtime pins ({', '.join(pinned)}): not checked in a dry run", KEY)
    wrong = mismatches(expected, actual or installed())
    if wrong:
        return Finding(RULE, Status.failed,
                       "the installed software differs from the pins: " + "; ".join(wrong)
                       + " (install the pinned build, or set the pin to null to measure "
                       "without it)", KEY)
    return Finding(RULE, Status.passed, f"runtime matches its pins ({', '.join(pinned)})", KEY)
