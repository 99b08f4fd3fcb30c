"""The dry run's estimate from evidence: the boot time and per-request output speed of the latest
bench or smoke run on the same profile (hardware and model), read from its records.

A bench run's cells give both (the median boot to health; the median of each valid cell's
output throughput over its concurrency); a smoke gives its boot to health and its one request's
speed (completion tokens over latency: a request alone, so faster than one under load). Runs
are looked for under `runs/bench/*` and `runs/smoke/*` of the current directory, where dspark
writes them by default; every record is read as untrusted (`untrusted.py`): a file that is not
a record is passed over, never followed outside its directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from dspark_cli.bench import records
from dspark_cli.paths import CELL_JSON, CELLS_DIR, SMOKE_JSON
from dspark_cli.untrusted import AMOUNT, COUNT, MAP, TEXT, RecordError, load_record

# The profile groups that decide a boot and an output speed (cell.json's and smoke.json's
# `profiles`).
SAME = ("hw", "model")
SMOKE_FIELDS = {
    "profiles": MAP,
    "profiles.*": TEXT,
    "timings": MAP,
    "timings.boot_to_health_s": AMOUNT,
    "timings.request_latency_s": AMOUNT,
    "request": MAP,
    "request.completion_tokens": COUNT,
    "request.latency_s": AMOUNT,
}


@dataclass(frozen=True)
class Evidence:
    """Figures measured by an earlier run: where, and what kind of run."""

    boot_s: float
    tokens_per_s: float
    source: Path
    kind: str  # "bench" or "smoke"

    def to_dict(self) -> dict[str, Any]:
        return {
            "boot_s": round(self.boot_s, 1),
            "tokens_per_s": round(self.tokens_per_s, 2),
            "run": str(self.source),
            "kind": self.kind,
        }


def _same(profiles: Any, wanted: Mapping[str, str]) -> bool:
    return isinstance(profiles, Mapping) and all(profiles.get(g) == wanted[g] for g in SAME)


def _bench(run: Path, wanted: Mapping[str, str]) -> Evidence | None:
    boots, speeds = [], []
    for path in sorted((run / CELLS_DIR).glob(f"*/{CELL_JSON}")):
        try:
            cell = records.read(path, run)
        except RecordError:
            continue
        if not _same(cell.evidence.get("profiles"), wanted):
            continue
        if cell.boot_s:
            boots.append(cell.boot_s)
        if cell.valid and cell.output_throughput:
            speeds.append(cell.output_throughput / cell.concurrency)
    if not boots or not speeds:
        return None
    return Evidence(median(boots), median(speeds), run, "bench")


def _smoke(run: Path, wanted: Mapping[str, str]) -> Evidence | None:
    try:
        data = load_record(run / SMOKE_JSON, run, SMOKE_FIELDS)
    except RecordError:
        return None
    if not isinstance(data, dict) or not _same(data.get("profiles"), wanted):
        return None
    boot = (data.get("timings") or {}).get("boot_to_health_s")
    request = data.get("request") or {}
    tokens, latency = request.get("completion_tokens"), request.get("latency_s")
    if not boot or not tokens or not latency:
        return None
    return Evidence(float(boot), tokens / latency, run, "smoke")


def latest(root: Path, profiles: Mapping[str, str]) -> Evidence | None:
    """The figures of the newest bench or smoke run under `root`/runs on `profiles`' hardware
    and model (newest by its record's modification time); None without one."""
    found: list[tuple[float, Path, str]] = []
    for kind, record in (("bench", f"{CELLS_DIR}/*/{CELL_JSON}"), ("smoke", SMOKE_JSON)):
        for path in (root / "runs" / kind).glob(f"*/{record}"):
            run = path.parent if kind == "smoke" else path.parent.parent.parent
            try:
                found.append((path.stat().st_mtime, run, kind))
            except OSError:
                continue
    seen: set[Path] = set()
    for _, run, kind in sorted(found, reverse=True):
        if run in seen:
            continue
        seen.add(run)
        evidence = _bench(run, profiles) if kind == "bench" else _smoke(run, profiles)
        if evidence is not None:
            return evidence
    return None
