"""What dspark adds around `vllm bench serve`'s load in one bench cell, as a share of a GPU cell.

Runs the real command (`dspark bench bench=cpu`: 2 arms x 2 concurrencies, each cell a warmup
and a measured phase, vLLM's real `vllm bench serve`) against the fake vLLM server, whose boot
and teardown take milliseconds, once per checkout given, then reads each cell's cell.json and
its phases' vLLM result files:

    per phase:  start = phase wall time - vLLM's own `duration` of its load
                (spawning the load generator, importing vLLM, loading the tokenizer, its exit)
    per cell:   around = cell wall time - boot - phase wall times - teardown
                (port check, log watch, /metrics before and after, validity, the record)

The GPU cell it is set against (the assumption): 3 phases (two warmups of 10 s each and a
measured phase of 60 s, or of 120 s), the boot left out (a large model's boot would only make
the share smaller). Its overhead is `around + 3 * start`, and the share is that overhead over
the cell's load plus that overhead. The load generator's start is measured on this machine
(2 shared cores), a pessimistic stand-in for a GPU host's.

    .venv/bin/python benchmarks/bench_overhead.py [CHECKOUT ...]

Each CHECKOUT is a dspark source tree (default: this one), run with PYTHONPATH set to it, e.g.
the tree before a change (`git worktree add /tmp/before REV`) beside this one.
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GPU_WARMUPS_S = (10.0, 10.0)
GPU_MEASURED_S = (60.0, 120.0)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_bench(checkout: Path, run_dir: Path) -> float:
    """`dspark bench bench=cpu` from `checkout` into `run_dir`; its wall time."""
    port = free_port()
    fake = ",".join([sys.executable, str(checkout / "tests/doubles/fake_vllm.py"),
                     "--port", str(port), "--k", "3"])
    argv = [sys.executable, "-m", "dspark_cli.cli", "bench", "bench=cpu", "+hw=cpu",
            f"server.port={port}", f"server.command=[{fake}]", f"hydra.run.dir={run_dir}",
            "--json"]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONPATH": str(checkout)})
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"dspark bench in {checkout} failed ({done.returncode}):\n"
                 f"{done.stderr[-3000:]}")
    return wall


def measure(checkout: Path) -> tuple[list[float], list[float]]:
    """Per-phase load-generator starts and per-cell overheads around the phases (s)."""
    starts: list[float] = []
    around: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        run_bench(checkout, run_dir)
        for cell_json in sorted(run_dir.glob("cells/*/cell.json")):
            cell = json.loads(cell_json.read_text())
            t = cell["timings"]
            for result in sorted(cell_json.parent.glob("*.result.json")):
                vllm_s = float(json.loads(result.read_text())["duration"])
                starts.append(_phase_wall(cell, result) - vllm_s)
            around.append(t["total_s"] - t["boot_s"] - t["load_s"] - t["teardown_s"])
    if not starts:
        sys.exit(f"{checkout}: no phase results to read")
    return starts, around


def _phase_wall(cell: dict[str, Any], result: Path) -> float:
    """A phase's wall time as dspark timed it (its record in cell.json)."""
    name = result.name.removesuffix(".result.json")
    for phase in cell["phases"]:
        if phase["name"] == name:
            return float(phase["duration_s"])
    raise SystemExit(f"{result.parent}: no phase {name} in cell.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="*", type=Path, default=[REPO])
    args = parser.parse_args()
    phases = len(GPU_WARMUPS_S) + 1
    for checkout in args.checkouts:
        starts, around = measure(checkout.resolve())
        start, fixed = statistics.mean(starts), statistics.mean(around)
        overhead = fixed + phases * start
        shares = [overhead / (sum(GPU_WARMUPS_S) + m + overhead) for m in GPU_MEASURED_S]
        print(f"{checkout}: load-generator start per phase {start:.2f} s (mean of "
              f"{len(starts)}, max {max(starts):.2f}); around the phases per cell "
              f"{fixed:.2f} s (mean of {len(around)})")
        print(f"  a GPU cell of {phases} phases: overhead {overhead:.1f} s = "
              + ", ".join(f"{s:.1%} of a cell whose measured phase lasts {m:.0f} s"
                          for s, m in zip(shares, GPU_MEASURED_S, strict=True)))


if __name__ == "__main__":
    main()
