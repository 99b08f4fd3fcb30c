"""`dspark report` on a 21-cell, 3-repeat run directory against just reading its JSON records,
in the same run.

The run directory is synthetic but in the real record format (tests/report_factory.py: the
seed's protocol, 3 arms x 7 concurrencies, each cell a real `CellRecord`, the arms' run records,
a smoke record, summary.json with the statistics). Measured, median of --runs:
- reference: json.load of every record the report reads (cell.json x 63, summary.json,
  smoke.json, provenance.json x 4);
- report (in process): collect the records, build the report, render Markdown and JSON, write
  both files;
- `dspark report DIR` (the CLI, a fresh interpreter: imports and Hydra included).
Goal: the in-process report under 1 s; exits 1 when it misses.
Usage: .venv/bin/python benchmarks/report_render.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
GOAL_S = 1.0
REPEATS = 3


def median_s(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def read_records(root: Path) -> int:
    names = ("cell.json", "summary.json", "smoke.json", "provenance.json")
    return sum(len(json.loads(p.read_text())) for n in names for p in root.rglob(n))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="report-bench-") as tmp:
        os.environ.setdefault("DSPARK_CACHE_DIR", str(Path(tmp) / "cache"))
        from dspark_cli.report.markdown import write_report
        from tests.report_factory import bench_run, smoke_run

        root = Path(tmp) / "run"
        smoke_run(root / "smoke")
        bench_run(root / "bench", repeats=REPEATS)
        records = len(list(root.rglob("cell.json")))
        reference = median_s(lambda: read_records(root), args.runs)
        in_process = median_s(lambda: write_report([root], root), args.runs)
        cli = median_s(lambda: subprocess.run(
            [sys.executable, "-m", "dspark_cli.cli", "report", str(root)], check=True,
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO)}), args.runs)
        size = (root / "report.md").stat().st_size
    print(f"run directory: {records} cell records ({records // REPEATS} cells x {REPEATS} "
          "repeats), summary.json, smoke, 4 run records; "
          f"report.md {size:,} bytes; median of {args.runs} runs")
    print(f"{'reference: read every JSON record':<44} {reference * 1000:8.1f} ms")
    print(f"{'report in process (build, render, write)':<44} {in_process * 1000:8.1f} ms  "
          f"({in_process / reference:.1f}x the reference; goal < {GOAL_S:.0f} s)")
    print(f"{'`dspark report DIR` (fresh interpreter)':<44} {cli * 1000:8.1f} ms")
    if in_process >= GOAL_S:
        print(f"MISSED: the report took {in_process:.2f} s (goal < {GOAL_S:.0f} s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
