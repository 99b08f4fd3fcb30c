"""Turn cell records into the protocol's summary: cells, speedups, JSON and CSV (`render.py`
draws it for the terminal).

Only valid cells enter a speedup or an average; an invalid cell is listed with its reasons and
its raw number, so a reader sees what was measured and why it does not count.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from dspark_cli.bench.cell import CellRecord

SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
CSV_COLUMNS = (
    "arm",
    "concurrency",
    "valid",
    "output_throughput",
    "speedup",
    "request_throughput",
    "total_output_tokens",
    "acceptance_length",
    "boot_s",
    "reasons",
)


@dataclass(frozen=True)
class CellRow:
    arm: str
    concurrency: int
    valid: bool
    reasons: tuple[str, ...]
    output_throughput: float | None
    request_throughput: float | None
    total_output_tokens: int | None
    acceptance_length: float | None
    boot_s: float | None
    speedup: float | None  # over the baseline arm at this concurrency; None unless both valid


@dataclass(frozen=True)
class Speedup:
    arm: str
    concurrency: int
    speedup: float | None
    note: str  # why there is no number, or "" when there is


@dataclass(frozen=True)
class Summary:
    protocol: str
    arms: tuple[str, ...]
    baseline: str
    concurrencies: tuple[int, ...]
    cells: tuple[CellRow, ...]
    speedups: tuple[Speedup, ...]
    mean_speedup: Mapping[str, float | None]  # geometric mean over valid pairs, per arm

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["mean_speedup"] = dict(self.mean_speedup)
        out["counts"] = {
            "cells": len(self.cells),
            "valid": sum(c.valid for c in self.cells),
            "invalid": sum(not c.valid for c in self.cells),
        }
        return out


def _row(record: CellRecord) -> CellRow:
    return CellRow(
        arm=record.arm,
        concurrency=record.concurrency,
        valid=record.valid,
        reasons=record.reasons,
        output_throughput=record.output_throughput,
        request_throughput=record.request_throughput,
        total_output_tokens=record.total_output_tokens,
        acceptance_length=record.acceptance_length,
        boot_s=record.boot_s,
        speedup=None,
    )


def _speedup(cell: CellRow | None, base: CellRow | None) -> tuple[float | None, str]:
    if cell is None:
        return None, "cell not run"
    if base is None:
        return None, "baseline cell not run"
    if not cell.valid:
        return None, "cell invalid"
    if not base.valid:
        return None, "baseline cell invalid"
    if not base.output_throughput or cell.output_throughput is None:
        return None, "no throughput"
    return cell.output_throughput / base.output_throughput, ""


def summarize(
    records: Sequence[CellRecord],
    *,
    protocol: str,
    arms: Sequence[str],
    baseline: str,
    concurrencies: Sequence[int],
) -> Summary:
    """Order cells as the protocol does (concurrency-major) and compute every speedup."""
    by_key = {(r.arm, r.concurrency): r for r in map(_row, records)}
    speedups = []
    rows = []
    for c in concurrencies:
        base = by_key.get((baseline, c))
        for arm in arms:
            cell = by_key.get((arm, c))
            value, note = _speedup(cell, base)
            if arm != baseline:
                speedups.append(Speedup(arm, c, value, note))
            if cell is not None:
                rows.append(replace(cell, speedup=value))
    # Cells of arms or concurrencies the protocol does not list still show (after the rest).
    listed = {(r.arm, r.concurrency) for r in rows}
    rows.extend(r for k, r in by_key.items() if k not in listed)
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
        cells=tuple(rows),
        speedups=tuple(speedups),
        mean_speedup=mean,
    )


def write(summary: Summary, directory: Path) -> tuple[Path, Path]:
    """Write summary.json and summary.csv into `directory`; returns their paths."""
    json_path = directory / SUMMARY_JSON
    csv_path = directory / SUMMARY_CSV
    json_path.write_text(json.dumps(summary.as_dict(), indent=2) + "\n")
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for cell in summary.cells:
            row = asdict(cell)
            row["reasons"] = "; ".join(cell.reasons)
            writer.writerow({k: row[k] for k in CSV_COLUMNS})
    return json_path, csv_path
