"""Boot-to-health of the CPU default with vLLM's shipped process tree (API server, engine core,
worker) and with the model in the engine core process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, the
uniprocess executor: what the test suite's real servers run, tests/conftest.py), in the same run.

    .venv/bin/python benchmarks/engine_processes.py [--rounds 2] [--nodes 2]

Each round runs `dspark smoke` once each way, the order alternating between rounds so that a
machine getting busier or quieter favours neither; every smoke must pass. With `--nodes 2`
(deploy=local, data parallel 2) the one-process way also asks each rank for the uniprocess
executor (`hw.args.distributed_executor_backend=uni`: vLLM picks "mp" for any DP world) and
the head for one API server (`api_server_count=1`: vLLM starts one per rank, each its own
process importing vLLM), as the suite's two-node tests do (`LEAN_RANKS`, tests/conftest.py).
Prints each way's boot-to-health and smoke total (median), and their difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from dspark_cli.server.process import free_port  # noqa: E402

SWITCH = "VLLM_ENABLE_V1_MULTIPROCESSING"
WAYS = {"shipped": "1", "one process": "0"}


def smoke(run_dir: Path, way: str, nodes: int) -> dict[str, float]:
    """One real `dspark smoke` of the CPU default; its timings (exits on a failed smoke)."""
    overrides = [f"server.port={free_port()}", f"hydra.run.dir={run_dir}", "--json"]
    if nodes > 1:
        overrides += ["+hw=cpu", f"hw.nodes={nodes}", f"hw.dp_rpc_port={free_port()}"]
        if WAYS[way] == "0":
            overrides += ["hw.args.distributed_executor_backend=uni",
                          "+serving.extra_args.api_server_count=1"]
    env = {**os.environ, "PYTHONPATH": str(REPO), SWITCH: WAYS[way]}
    done = subprocess.run([sys.executable, "-m", "dspark_cli.cli", "smoke", *overrides],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0 or not done.stdout.strip():
        sys.exit(f"{way}: dspark smoke exited {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)["timings"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=1)
    args = parser.parse_args()
    found: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="engine-processes-") as tmp:
        for r in range(args.rounds):
            for way in list(WAYS) if r % 2 == 0 else list(reversed(WAYS)):
                timings = smoke(Path(tmp) / f"{way.replace(' ', '-')}-{r}", way, args.nodes)
                print(f"round {r + 1}, {way}: boot-to-health {timings['boot_to_health_s']:.1f} s",
                      file=sys.stderr, flush=True)
                found[way].append(timings)
    median = {way: {key: statistics.median(t[key] for t in runs)
                    for key in ("boot_to_health_s", "total_s")} for way, runs in found.items()}
    print(f"{'way':<14}{'boot-to-health s':>18}{'smoke total s':>15}"
          f"   (median of {args.rounds}, {args.nodes} node(s))")
    for way, m in median.items():
        print(f"{way:<14}{m['boot_to_health_s']:>18.1f}{m['total_s']:>15.1f}")
    saved = median["shipped"]["boot_to_health_s"] - median["one process"]["boot_to_health_s"]
    print(f"one process boots {saved:.1f} s sooner "
          f"({saved / median['shipped']['boot_to_health_s']:.0%})")


if __name__ == "__main__":
    main()
