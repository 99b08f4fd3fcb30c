"""The summary on disk: summary.json (the whole `Summary`) and summary.csv (one row per cell,
the latency percentiles the table shows)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from dspark_cli.bench.summary import Summary
from dspark_cli.bench.summary_rows import CellRow
from dspark_cli.launch.secrets import redact_text
from dspark_cli.run_files import SUMMARY_CSV, SUMMARY_JSON
from dspark_cli.untrusted import write_atomic

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
    write_atomic(json_path, redact_text(json.dumps(summary.as_dict(), indent=2) + "\n"))
    rows = io.StringIO(newline="")
    writer = csv.DictWriter(rows, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    writer.writerows(_csv_row(cell) for cell in summary.cells)
    write_atomic(csv_path, redact_text(rows.getvalue()))
    return json_path, csv_path
