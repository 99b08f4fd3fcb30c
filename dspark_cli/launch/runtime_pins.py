"""The `runtime-pins` preflight finding: the installed software (`launch/runtime.py`, read from
metadata) held against `runtime.expected.*`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspark_cli.launch.runtime import Runtime, installed
from dspark_cli.paths import conf_dir
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


_VERSION_OF = {"vllm_commit": "vllm_version", "aiter_commit": "aiter_version",
               "aiter_wheel_sha256": "aiter_version", "cuda": "torch", "rocm": "torch"}


def _absent(key: str, have: Mapping[str, str | None]) -> str:
    """Why a fact is missing: the package is not installed, or its metadata does not say."""
    package = have.get(_VERSION_OF.get(key, ""))
    if package:
        return f"none recorded (installed: {package})"
    return "nothing installed"


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
            out.append(f"{key}: expected {want}, found {have[key] or _absent(key, have)}")
    return out


def reference_pins(name: str) -> dict[str, Any]:
    """The pins of image group `name` (conf/image/<name>.yaml), read as plain YAML: what a run
    without pins is compared with. {} when there is no such group."""
    from dspark_cli.config.typed import read_yaml

    path = conf_dir() / "image" / f"{name}.yaml"
    if not path.is_file():
        return {}
    pins = (read_yaml(path).get("runtime") or {}).get("expected")
    return {k: v for k, v in (pins or {}).items() if v is not None}


def reference_note(reference: str | None, actual: Runtime) -> str | None:
    """One sentence: how this environment's software differs from the reference image's pins
    (None when there is no reference or nothing differs). Noted, never refused."""
    if not reference:
        return None
    pins = reference_pins(reference)
    wrong = mismatches(pins, actual) if pins else []
    if not wrong:
        return None
    return (f"the software here is not the image `+image={reference}` pins (noted, not refused; "
            "a run records what it ran on): " + "; ".join(wrong))


def finding(expected: Mapping[str, Any] | None, dry_run: bool,
            actual: Runtime | None = None, reference: str | None = None) -> Finding:
    """The `runtime-pins` preflight finding. Without pins it passes (and notes how this
    environment differs from the `reference` image); a dry run plans for another machine, so
    it does not fail there, but says what a real run in this environment would refuse among the
    pins installed metadata shows."""
    pinned = sorted(k for k, v in (expected or {}).items() if v is not None)
    if not pinned:
        note = reference_note(reference, actual or installed()) if reference else None
        return Finding(RULE, Status.passed, "no runtime pins set", KEY, note=note)
    wrong = mismatches(expected or {}, actual or installed())
    if dry_run:
        said = (f"a real run in this environment would refuse: {'; '.join(wrong)}" if wrong
                else "this environment matches them")
        # what a real run here would refuse is said even where skips are summed up in one line
        return Finding(RULE, Status.skipped,
                       f"runtime pins ({', '.join(pinned)}) are checked at run time; {said}",
                       KEY, note=f"runtime pins: {said}" if wrong else None)
    if wrong:
        return Finding(RULE, Status.failed,
                       "the installed software differs from the pins: " + "; ".join(wrong)
                       + " (install the pinned build, set a pin to null, or "
                       "runtime.expected=null to measure without any)", KEY)
    return Finding(RULE, Status.passed, f"runtime matches its pins ({', '.join(pinned)})", KEY)
