"""What `dspark bench` itself costs per cell, beside the server's boot and the load: goal <= 2 s.

Runs the real command (`dspark bench bench=cpu`, 2 arms x 2 concurrencies, its real phases and
vLLM's real `vllm bench serve`) against the fake vLLM server, whose boot and teardown take
milliseconds, then reads each cell's timings from its cell.json:

    overhead = cell wall time - boot - load-generator phases - teardown

i.e. the port check, the log watcher, /metrics before and after, validity, the record. The
run's fixed costs (composing and preparing the arms, summary, CSV, plot, interpreter start)
are shown per cell too, as the wall time of the command not spent inside a cell.

    .venv/bin/python benchmarks/bench_overhead.py [--cells-dir DIR]
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
GOAL_S = 2.0


def run_bench(run_dir: Path) -> float:
    from doubles.fake_vllm import SCRIPT

    from dspark_cli.server.process import free_port

    port = free_port()
    fake = ",".join([sys.executable, str(SCRIPT), "--port", str(port), "--k", "3"])
    argv = [sys.executable, "-m", "dspark_cli.cli", "bench", "bench=cpu", "+hw=cpu",
            f"server.port={port}", f"server.command=[{fake}]", f"hydra.run.dir={run_dir}",
            "--json"]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"dspark bench failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells-dir", type=Path, help="keep the run here (default: a tmp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.cells_dir or Path(tmp) / "run"
        wall = run_bench(run_dir)
        cells = [json.loads(p.read_text()) for p in sorted(run_dir.glob("cells/*/cell.json"))]
    print(f"{'cell':<18}{'boot s':>8}{'load s':>9}{'teardown s':>12}{'overhead s':>12}")
    for c in cells:
        t = c["timings"]
        print(f"{c['cell_id']:<18}{t['boot_s']:>8.2f}{t['load_s']:>9.2f}"
              f"{t['teardown_s']:>12.2f}{t['overhead_s']:>12.3f}")
    overheads = [c["timings"]["overhead_s"] for c in cells]
    in_cells = sum(c["timings"]["total_s"] for c in cells)
    fixed = (wall - in_cells) / len(cells)
    worst = max(overheads)
    print(f"\ncells: {len(cells)}; per-cell overhead mean {statistics.mean(overheads):.3f} s, "
          f"max {worst:.3f} s (goal <= {GOAL_S:.1f} s): {'MET' if worst <= GOAL_S else 'MISSED'}")
    print(f"run-level fixed cost (compose, prepare, summary, plot, start-up) per cell: "
          f"{fixed:.2f} s over {wall:.1f} s of wall time")


if __name__ == "__main__":
    main()
