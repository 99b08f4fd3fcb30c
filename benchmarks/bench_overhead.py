"""What dspark adds around vLLM's load in a bench cell, against the same phases run by hand.

Runs the real command (`dspark bench`, by default `bench=cpu +hw=cpu`: 2 arms x 2
concurrencies, each cell a warmup and a measured phase) once per checkout given, then reads
each cell's cell.json and its phases' vLLM result files:

    per phase:  start = phase wall time (dspark's record) - vLLM's own `duration` of its load
                (a load-generator process, vLLM's imports, the tokenizer, the request set)
    per cell:   around = cell wall time - boot - phase wall times - teardown
                (port check, log watch, /metrics before and after, probes, the record)

The reference, in the same run: every phase of the plan (`dspark bench --dry-run --json`) run
by hand, one `vllm bench serve` process each as an operator runs them, against a server of
the same model; its start per phase is its wall time minus vLLM's `duration`. The target: the
checkout's start per phase at most a fifth of the reference's (`--target`).

Engines (`--engine`):
  fake  (default) the fake vLLM (tests/doubles/fake_vllm.py: boots and tears down in
        milliseconds, so the load generator's import is not hidden behind a boot) for every
        cell and for the reference; this machine needs no GPU.
  real  the configured engine: `dspark bench` boots it per cell from the overrides (`--set`,
        e.g. `--set +hw=h200 --set model=... --set bench=speed_bench_throughput_1k`), and the
        reference runs against `--url` (a server of the same config, e.g. started with
        `dspark serve` and the same overrides), or against one this script starts with
        `dspark serve` when no URL is given.

It also prints each checkout's overhead as a share of its cells (GPU-sized, with `real`) and
of an assumed GPU cell (two warmups of 10 s and a measured phase of 60 s or 120 s).

    .venv/bin/python benchmarks/bench_overhead.py [CHECKOUT ...] [--engine real --set K=V ...]

Each CHECKOUT is a dspark source tree (default: this one), run with PYTHONPATH set to it, e.g.
the tree before a change (`git worktree add /tmp/before REV`) beside this one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests/doubles/fake_vllm.py"
GPU_WARMUPS_S = (10.0, 10.0)
GPU_MEASURED_S = (60.0, 120.0)
HEALTH_TIMEOUT_S = 1800.0


def free_port() -> int:
    sys.path.insert(0, str(REPO))
    from dspark_cli.server.process import free_port as pick

    return pick()


def dspark(checkout: Path, *args: str, timeout: float = 7200) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "dspark_cli.cli", *args]
    return subprocess.run(
        argv,
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(checkout)},
    )


def bench_args(engine: str, port: int, sets: Sequence[str]) -> list[str]:
    """`dspark bench`'s arguments: the fake server per cell, or the configured engine."""
    if engine == "fake":
        fake = ",".join([sys.executable, str(FAKE), "--port", str(port), "--k", "3"])
        return [
            "bench",
            "bench=cpu",
            "+hw=cpu",
            *sets,
            f"server.port={port}",
            f"server.command=[{fake}]",
        ]
    return ["bench", *sets, f"server.port={port}"]


def run_bench(checkout: Path, args: list[str], run_dir: Path) -> float:
    """`dspark bench` from `checkout` into `run_dir`; its wall time."""
    start = time.monotonic()
    done = dspark(checkout, *args, f"hydra.run.dir={run_dir}", "--json")
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"dspark bench in {checkout} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall


def measure(checkout: Path, args: list[str]) -> dict[str, Any]:
    """Per-phase starts, per-cell overheads around the phases and load-generator starts."""
    starts: list[float] = []
    around: list[float] = []
    loads: list[float] = []
    pids: set[int] = set()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        run_bench(checkout, args, run_dir)
        for cell_json in sorted(run_dir.glob("cells/*/cell.json")):
            cell = json.loads(cell_json.read_text())
            t = cell["timings"]
            phases = {p["name"]: float(p["duration_s"]) for p in cell["phases"]}
            for result in sorted(cell_json.parent.glob("*.result.json")):
                vllm_s = float(json.loads(result.read_text())["duration"])
                starts.append(phases[result.name.removesuffix(".result.json")] - vllm_s)
                loads.append(vllm_s)
            around.append(t["total_s"] - t["boot_s"] - t["load_s"] - t["teardown_s"])
            if isinstance(cell.get("load_generator"), dict):
                pids.add(int(cell["load_generator"]["pid"]))
    if not starts:
        sys.exit(f"{checkout}: no phase results to read")
    return {
        "starts": starts,
        "around": around,
        "loads": loads,
        "cells": len(around),
        "loadgen_starts": len(pids) if pids else len(starts),
    }


def planned_phases(args: list[str], url: str) -> list[list[str]]:
    """Every phase's `vllm bench serve` line of the plan, pointed at `url` (this checkout's
    dry run; the result directory is replaced by the caller)."""
    done = dspark(REPO, *args, "--dry-run", "--json", timeout=600)
    if done.returncode != 0:
        sys.exit(f"dspark bench --dry-run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    plan = json.loads(done.stdout)
    out = []
    for cell in plan["cells"]:
        for phase in cell["phases"]:
            argv = list(phase["argv"])
            argv[argv.index("--base-url") + 1] = url
            out.append(argv)
    return out


def by_hand(argvs: list[list[str]]) -> list[float]:
    """Each phase as its own `vllm bench serve` process; wall time minus vLLM's duration."""
    sys.path.insert(0, str(REPO))
    from dspark_cli.vllm.shim import vllm_command

    starts = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, argv in enumerate(argvs):
            argv = list(argv)
            argv[argv.index("--result-dir") + 1] = tmp
            argv[argv.index("--result-filename") + 1] = f"{i}.json"
            start = time.monotonic()
            done = subprocess.run(vllm_command(argv), capture_output=True, text=True, timeout=7200)
            wall = time.monotonic() - start
            if done.returncode != 0:
                sys.exit(f"by hand: {shlex.join(argv)} failed:\n{done.stdout[-3000:]}")
            starts.append(
                wall - float(json.loads((Path(tmp) / f"{i}.json").read_text())["duration"])
            )
    return starts


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def reference_server(engine: str, url: str | None, sets: Sequence[str]) -> Iterator[str]:
    """The server the phases by hand run against: `url`, or one started here."""
    if url is not None:
        yield url.rstrip("/")
        return
    port = free_port()
    argv = (
        [sys.executable, str(FAKE), "--port", str(port), "--k", "3"]
        if engine == "fake"
        else [sys.executable, "-m", "dspark_cli.cli", "serve", *sets, f"server.port={port}"]
    )
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while not _healthy(base):
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"the reference server did not become healthy: {shlex.join(argv)}")
            time.sleep(1)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)  # dspark serve stops its server on SIGTERM
        proc.wait(120)


def line(name: str, seen: dict[str, Any]) -> str:
    start = statistics.mean(seen["starts"])
    fixed = statistics.mean(seen["around"])
    phases = len(GPU_WARMUPS_S) + 1
    overhead = fixed + phases * start
    shares = [overhead / (sum(GPU_WARMUPS_S) + m + overhead) for m in GPU_MEASURED_S]
    own = (sum(seen["starts"]) + sum(seen["around"])) / (
        sum(seen["loads"]) + sum(seen["starts"]) + sum(seen["around"])
    )
    return (
        f"{name}: start per phase {start:.2f} s (mean of {len(seen['starts'])}, max "
        f"{max(seen['starts']):.2f}; {seen['loadgen_starts']} load-generator process(es) for "
        f"{seen['cells']} cells); around the phases per cell {fixed:.2f} s\n"
        f"  share of these cells' time after the boot: {own:.1%}; of a GPU cell of "
        f"{phases} phases: overhead {overhead:.1f} s = "
        + ", ".join(
            f"{s:.1%} with a measured phase of {m:.0f} s"
            for s, m in zip(shares, GPU_MEASURED_S, strict=True)
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="*", type=Path, default=[REPO])
    parser.add_argument("--engine", choices=("fake", "real"), default="fake")
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Hydra override for dspark bench (and serve), repeatable",
    )
    parser.add_argument("--url", help="with --engine real: the reference's running server")
    parser.add_argument(
        "--target",
        type=float,
        default=5.0,
        help="the reference's start per phase over the checkout's, at least",
    )
    args = parser.parse_args()
    bench = bench_args(args.engine, free_port(), args.sets)
    print(f"dspark {shlex.join(bench)}")
    with reference_server(args.engine, args.url, args.sets) as url:
        reference = by_hand(planned_phases(bench, url))
    ref = statistics.mean(reference)
    print(
        f"reference, each phase run by hand with `vllm bench serve` ({len(reference)} "
        f"phases against {url}): start per phase {ref:.2f} s (max {max(reference):.2f})"
    )
    for checkout in args.checkouts:
        seen = measure(checkout.resolve(), bench_args(args.engine, free_port(), args.sets))
        print(line(str(checkout), seen))
        mine = statistics.mean(seen["starts"])
        ratio = ref / mine if mine > 0 else float("inf")
        verdict = "met" if ratio >= args.target else "NOT met"
        print(
            f"  against the reference: {ratio:.1f}x less per phase (target "
            f"{args.target:g}x: {verdict})"
        )


if __name__ == "__main__":
    main()
