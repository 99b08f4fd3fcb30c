"""Turn cell records into the protocol's summary: per repeat, per arm and concurrency (the
repeats aggregated: mean throughput with its interval, acceptance, latency percentiles), the
speedups with their intervals and verdicts; its rows (a cell, an arm at one concurrency over
its repeats, a speedup with its verdict), each frozen with the dict it writes into
summary.json; and the summary on disk (`write`: summary.json, and summary.csv with one row per
cell and the latency percentiles the table shows). `render.py` draws it for the terminal.

Only valid cells (repeats) enter a speedup or an average; an invalid one is listed with its
reasons and its raw number, so a reader sees what was measured and why it does not count."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from statistics import fmean
from typing import Any

from dspark_cli.bench import goodput as gp
from dspark_cli.bench import lossless, stats, winners
from dspark_cli.bench.cell import CellRecord
from dspark_cli.bench.protocol import variant
from dspark_cli.console import json_text
from dspark_cli.launch.secrets import redact_text
from dspark_cli.paths import SUMMARY_CSV, SUMMARY_JSON
from dspark_cli.untrusted import write_atomic


@dataclass(frozen=True)
class Summary:
    """`arms` and `baseline` are variants (`protocol.variant`): with the prefix-caching axis
    on and off, each arm is two, `<arm>` and `<arm>+pc-off`."""

    protocol: str
    arms: tuple[str, ...]
    baseline: str
    concurrencies: tuple[int, ...]
    repeats: int
    equivalence_margin: float
    cells: tuple[CellRow, ...]
    results: tuple[ArmResult, ...]  # per arm and concurrency, in the protocol's order
    speedups: tuple[SpeedupRow, ...]
    mean_speedup: Mapping[str, float | None]  # geometric mean over valid pairs, per arm
    objectives: gp.Objectives | None = None
    winners: tuple[winners.Winner, ...] = ()  # the arm to run per concurrency
    prefix_caching: tuple[bool, ...] = (True,)  # the protocol's axis

    @property
    def results_sentence(self) -> str:
        return stats.results_sentence([s.result for s in self.speedups if s.result])

    def result(self, arm: str, concurrency: int) -> ArmResult | None:
        return next((r for r in self.results if (r.arm, r.concurrency) == (arm, concurrency)),
                    None)

    def speedup(self, arm: str, concurrency: int) -> SpeedupRow | None:
        return next((s for s in self.speedups if (s.arm, s.concurrency) == (arm, concurrency)),
                    None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol, "arms": list(self.arms), "baseline": self.baseline,
            "concurrencies": list(self.concurrencies), "repeats": self.repeats,
            "equivalence_margin": self.equivalence_margin,
            "prefix_caching": list(self.prefix_caching),
            "cells": [c.to_dict() for c in self.cells],
            "results": [r.to_dict() for r in self.results],
            "speedups": [s.to_dict() for s in self.speedups],
            "mean_speedup": dict(self.mean_speedup),
            "results_sentence": self.results_sentence,
            "objectives": None if self.objectives is None else self.objectives.to_dict(),
            "winners": [w.to_dict() for w in self.winners],
            "gpu_flags": [{"cell_id": c.cell_id, "flag": f} for c in self.cells
                          for f in c.gpu_flags],
            "lossless": lossless.by_arm([(c.variant, c.cell_id, c.lossless, c.lossless_check)
                                         for c in self.cells], self.arms),
            "counts": {
                "cells": len(self.cells),
                "degraded": sum(bool(c.degraded) for c in self.cells),
                "valid": sum(c.valid for c in self.cells),
                "invalid": sum(not c.valid for c in self.cells),
            },
        }


def _row(record: CellRecord) -> CellRow:
    """The record's fields of the same names, its GPUs in one row; `speedup` is its arm's, set
    once all are read."""
    return CellRow(speedup=None, gpus=cell_gpus(record.evidence.get("gpus")),
                   **{f.name: getattr(record, f.name) for f in fields(CellRow)
                      if f.name not in ("speedup", "lossless_check", "gpus")})


def _lossless(rows: Sequence[CellRow], concurrencies: Sequence[int]) -> list[CellRow]:
    """Every row's greedy answers compared with the reference arm's earliest cell (by
    concurrency in protocol order, then repeat); a row below its share becomes invalid."""
    def when(r: CellRow) -> tuple[int, int]:
        return (list(concurrencies).index(r.concurrency) if r.concurrency in concurrencies
                else len(concurrencies), r.repeat)

    ordered = sorted(rows, key=when)
    refs = {str(r.lossless.get("reference")) for r in ordered if r.lossless}
    found = {ref: lossless.reference_record(
        [(r.cell_id, r.arm, r.lossless) for r in ordered], ref) for ref in refs}
    out = []
    for row in rows:
        if not row.lossless:
            out.append(row)
            continue
        ref = found.get(str(row.lossless.get("reference")))
        check = None if ref is None else lossless.compare(ref[0], ref[1], row.lossless)
        why = lossless.lossless_reason(check, row.lossless)
        new = () if why is None or why in row.reasons else (why,)
        out.append(replace(row, lossless_check=None if check is None else check.to_dict(),
                           valid=row.valid and not new, reasons=(*row.reasons, *new)))
    return out


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(fmean(present), 4) if present else None


def _mean_latency(rows: Sequence[CellRow]) -> dict[str, dict[str, float]]:
    """Each recorded percentile averaged over the repeats that have it."""
    out: dict[str, dict[str, float]] = {}
    for metric in dict.fromkeys(m for r in rows for m in r.latency_ms):
        for p in dict.fromkeys(p for r in rows for p in r.latency_ms.get(metric, {})):
            values = [r.latency_ms[metric][p] for r in rows if p in r.latency_ms.get(metric, {})]
            out.setdefault(metric, {})[p] = round(fmean(values), 3)
    return out


def aggregate(arm: str, concurrency: int, rows: Sequence[CellRow]) -> ArmResult:
    """One arm at one concurrency from its repeats' rows (invalid ones only counted)."""
    rows = sorted(rows, key=lambda r: r.repeat)
    valid = [r for r in rows if r.valid]
    tps = tuple(float(r.output_throughput) for r in valid if r.output_throughput is not None)
    return ArmResult(
        arm=arm, concurrency=concurrency, repeats=tuple(r.repeat for r in rows),
        throughputs=tps, invalid=len(rows) - len(valid),
        throughput=stats.mean_interval(tps) if tps else None,
        acceptance_length=_mean([r.acceptance_length for r in valid]),
        accepted_per_draft=_mean([r.accepted_per_draft for r in valid]),
        latency_ms=_mean_latency(valid),
        goodput=gp.aggregate([r.goodput for r in valid]),
    )


def _speedup(cell: ArmResult | None, base: ArmResult | None, baseline: str,
             margin: float) -> tuple[stats.Speedup | None, str]:
    if cell is None:
        return None, "cell not run"
    if base is None:
        return None, "baseline cell not run"
    if not cell.throughputs:
        return None, "cell invalid" if cell.invalid else "no throughput"
    if not base.throughputs:
        return None, "baseline cell invalid" if base.invalid else "no throughput"
    if fmean(base.throughputs) <= 0:
        return None, "no throughput"
    result = stats.speedup(cell.arm, cell.throughputs, baseline, base.throughputs,
                           cell.concurrency, margin)
    left_out = [f"{r.invalid} of {len(r.repeats)} {what} repeats invalid"
                for r, what in ((cell, "arm"), (base, "baseline")) if r.invalid]
    return result, "; ".join(left_out)


def summarize(
    records: Sequence[CellRecord],
    *,
    protocol: str,
    arms: Sequence[str],
    baseline: str,
    concurrencies: Sequence[int],
    repeats: int = 1,
    equivalence_margin: float = 0.05,
    objectives: gp.Objectives | None = None,
    prefix_caching: Sequence[bool] = (True,),
) -> Summary:
    """Order cells as the protocol does (concurrency-major, then repeat), aggregate the repeats
    of each arm (variant: `arms` and `baseline` name them) and concurrency, and compute every
    speedup with its verdict."""
    rows_by_key: dict[tuple[str, int], list[CellRow]] = {}
    for row in _lossless([_row(r) for r in records], concurrencies):
        rows_by_key.setdefault((row.variant, row.concurrency), []).append(row)
    results = {key: aggregate(*key, rows) for key, rows in rows_by_key.items()}
    # Arms or concurrencies the protocol does not list still show (after the rest).
    order = [(a, c) for c in concurrencies for a in arms]
    order += [k for k in results if k not in order]
    speedups, ratio = [], {}
    for arm, c in order:
        if c not in concurrencies or arm not in arms:
            continue
        base = results.get((baseline, c))
        if arm == baseline:
            ratio[(arm, c)] = 1.0 if base and base.throughputs else None
            continue
        result, note = _speedup(results.get((arm, c)), base, baseline, equivalence_margin)
        speedups.append(SpeedupRow(arm, baseline, c, result, note))
        ratio[(arm, c)] = None if result is None else result.ratio.estimate
    cells = tuple(replace(r, speedup=ratio.get(key))
                  for key in order for r in sorted(rows_by_key.get(key, ()),
                                                   key=lambda r: r.repeat))
    mean = {}
    for arm in arms:
        if arm == baseline:
            continue
        values = [s.speedup for s in speedups if s.arm == arm and s.speedup]
        mean[arm] = math.exp(sum(map(math.log, values)) / len(values)) if values else None
    return Summary(
        protocol=protocol,
        arms=tuple(arms),
        baseline=baseline,
        concurrencies=tuple(concurrencies),
        repeats=repeats,
        equivalence_margin=equivalence_margin,
        cells=cells,
        results=tuple(results[k] for k in order if k in results),
        speedups=tuple(speedups),
        mean_speedup=mean,
        objectives=objectives,
        winners=_winners(list(results.values()), concurrencies, equivalence_margin, objectives,
                         baseline),
        prefix_caching=tuple(prefix_caching),
    )


def _winners(results: Sequence[ArmResult], concurrencies: Sequence[int], margin: float,
             objectives: gp.Objectives | None, baseline: str) -> tuple[winners.Winner, ...]:
    """Per concurrency the arm to run: by goodput under an objective, else by throughput."""
    if objectives is None:
        return winners.pick([(r.arm, r.concurrency, r.throughputs) for r in results],
                            concurrencies, margin, winners.THROUGHPUT, baseline)
    return winners.pick([(r.arm, r.concurrency, r.goodput.values if r.goodput else ())
                         for r in results], concurrencies, margin, winners.GOODPUT, baseline)


Latency = Mapping[str, Mapping[str, float]]
# The per-GPU means (machine/gpu_sampler.py) a cell's row carries, averaged over its GPUs.
GPU_MEANS = ("utilization_pct", "power_w", "sm_clock_mhz", "memory_used_mib", "temperature_c")


@dataclass(frozen=True)
class CellRow:
    """One cell record: one repeat of one arm at one concurrency."""

    arm: str
    concurrency: int
    repeat: int
    cell_id: str
    valid: bool
    reasons: tuple[str, ...]
    output_throughput: float | None
    request_throughput: float | None
    total_output_tokens: int | None
    acceptance_length: float | None
    accepted_per_draft: float | None
    latency_ms: Latency
    boot_s: float | None
    speedup: float | None  # its arm's ratio of means over the baseline at this concurrency
    lossless: Mapping[str, Any] | None = None  # the record's greedy answers
    degraded: tuple[str, ...] = ()  # lines where vLLM overrode what was asked (still valid)
    lossless_check: Mapping[str, Any] | None = None  # their comparison with the reference's
    goodput: gp.Goodput | None = None  # under the protocol's objectives
    gpus: dict[str, Any] | None = None  # `cell_gpus` of its record; None: not sampled
    prefix_caching: bool = True  # False: the arm ran with prefix caching off

    @property
    def variant(self) -> str:
        """What the summary aggregates it under: its arm, or `<arm>+pc-off`."""
        return variant(self.arm, self.prefix_caching)

    @property
    def gpu_flags(self) -> list[str]:
        """A GPU that throttled or sat idle in the measured phase, one line each."""
        return list((self.gpus or {}).get("flags") or ())

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "prefix_caching": self.prefix_caching,
                "concurrency": self.concurrency, "repeat": self.repeat, "cell_id": self.cell_id,
                "valid": self.valid, "reasons": list(self.reasons),
                "output_throughput": self.output_throughput,
                "request_throughput": self.request_throughput,
                "total_output_tokens": self.total_output_tokens,
                "acceptance_length": self.acceptance_length,
                "accepted_per_draft": self.accepted_per_draft,
                "latency_ms": plain_latency(self.latency_ms), "boot_s": self.boot_s,
                "speedup": self.speedup, "lossless": self.lossless_check,
                "degraded": list(self.degraded),
                "goodput": None if self.goodput is None else self.goodput.to_dict(),
                "gpus": self.gpus}


def cell_gpus(section: Any) -> dict[str, Any] | None:
    """A cell's `gpus` record in one row: the tool, how many GPUs were sampled in the measured
    phase, each GPU_MEANS averaged over them, and the sampler's flags (a GPU that throttled or
    sat idle); None when nothing was sampled."""
    if not isinstance(section, Mapping):
        return None
    measured = [g["means"] for g in section.get("measured") or ()
                if isinstance(g, Mapping) and isinstance(g.get("means"), Mapping)]
    flags = [str(f) for f in section.get("flags") or ()]
    if not measured and not flags:
        return None
    means = {}
    for key in GPU_MEANS:
        values = [float(v) for m in measured if isinstance(v := m.get(key), int | float)
                  and not isinstance(v, bool)]
        if values:
            means[key] = round(fmean(values), 1)
    return {"tool": str(section.get("tool") or ""), "gpus": len(measured), "means": means,
            "flags": flags}


@dataclass(frozen=True)
class ArmResult:
    """One arm (`arm`: its variant, `<arm>+pc-off` with prefix caching off) at one
    concurrency over its valid repeats."""

    arm: str
    concurrency: int
    repeats: tuple[int, ...]  # the repeats recorded, valid or not
    throughputs: tuple[float, ...]  # the valid repeats' output throughput, in repeat order
    invalid: int  # how many recorded repeats are invalid
    throughput: stats.Interval | None  # None: no valid repeat
    acceptance_length: float | None  # means over the valid repeats
    accepted_per_draft: float | None
    latency_ms: Latency  # each percentile's mean over the valid repeats
    goodput: gp.GoodputResult | None = None  # None: no objective (or no valid repeat)

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "concurrency": self.concurrency,
                "goodput": None if self.goodput is None else self.goodput.to_dict(),
                "repeats": list(self.repeats), "throughputs": list(self.throughputs),
                "invalid_repeats": self.invalid,
                "throughput": None if self.throughput is None else self.throughput.to_dict(),
                "acceptance_length": self.acceptance_length,
                "accepted_per_draft": self.accepted_per_draft,
                "latency_ms": plain_latency(self.latency_ms)}


@dataclass(frozen=True)
class SpeedupRow:
    """A non-baseline arm at one concurrency: its speedup, or why there is none."""

    arm: str
    baseline: str
    concurrency: int
    result: stats.Speedup | None
    note: str  # why there is no speedup, or what it leaves out; "" when nothing to say

    @property
    def speedup(self) -> float | None:
        return None if self.result is None else self.result.ratio.estimate

    @property
    def verdict(self) -> stats.Verdict:
        return stats.Verdict.INCONCLUSIVE if self.result is None else self.result.verdict

    def to_dict(self) -> dict[str, Any]:
        if self.result is not None:
            return {**self.result.to_dict(), "speedup": self.speedup, "note": self.note}
        return {"arm": self.arm, "baseline": self.baseline, "concurrency": self.concurrency,
                "ratio": None, "verdict": str(self.verdict), "margin": None,
                "equivalence": None, "mde": None, "speedup": None, "note": self.note}


def plain_latency(latency: Latency) -> dict[str, dict[str, float]]:
    return {m: dict(ps) for m, ps in latency.items()}


# The latency percentiles the CSV and the table show (the summary.json keeps all recorded).
SHOWN_LATENCY = tuple((m, p) for m in ("ttft", "tpot", "itl") for p in ("p50", "p99"))
CSV_COLUMNS = (
    "arm",
    "prefix_caching",
    "concurrency",
    "repeat",
    "valid",
    "output_throughput",
    "speedup",
    "request_throughput",
    "total_output_tokens",
    "acceptance_length",
    "accepted_per_draft",
    *(f"{m}_{p}_ms" for m, p in SHOWN_LATENCY),
    "boot_s",
    "reasons",
)


def _csv_row(cell: CellRow) -> dict[str, Any]:
    row = cell.to_dict()
    row["reasons"] = "; ".join(cell.reasons)
    for m, p in SHOWN_LATENCY:
        row[f"{m}_{p}_ms"] = cell.latency_ms.get(m, {}).get(p)
    return {k: row[k] for k in CSV_COLUMNS}


def write(summary: Summary, directory: Path) -> tuple[Path, Path]:
    """Write summary.json and summary.csv into `directory` (redacted: cells read back may hold
    anything; each replaced at once, never through a link planted at its name); returns their
    paths."""
    json_path = directory / SUMMARY_JSON
    csv_path = directory / SUMMARY_CSV
    write_atomic(json_path, redact_text(json_text(summary.as_dict())))
    rows = io.StringIO(newline="")
    writer = csv.DictWriter(rows, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    writer.writerows(_csv_row(cell) for cell in summary.cells)
    write_atomic(csv_path, redact_text(rows.getvalue()))
    return json_path, csv_path
