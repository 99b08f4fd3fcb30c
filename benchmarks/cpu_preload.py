"""Output throughput of `dspark bench bench=cpu` with the cpu profile's LD_PRELOAD (tcmalloc and
Intel OpenMP, `hw.preload`) and without it (`hw.preload=[]`), in the same run.

Real vLLM CPU servers and vLLM's own `vllm bench serve`: each round runs the protocol once
without and once with the preload, the order alternating between rounds so that a machine
getting busier or quieter favours neither. Prints every cell's output tokens/s for both, their
ratio, and how many of vLLM's "not found in LD_PRELOAD" warnings each server log holds (proof
that the preload reached the server). Extra arguments are passed to `dspark bench`, e.g.

    nice .venv/bin/python benchmarks/cpu_preload.py                      # the whole protocol
    nice .venv/bin/python benchmarks/cpu_preload.py --rounds 2 bench.arm=draft_model \\
        bench.concurrency=8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WARNING = "is not found in LD_PRELOAD"
SETTINGS = {"without": ["hw.preload=[]"], "with": []}


def run_bench(run_dir: Path, settings: list[str], extra: list[str]) -> dict:
    argv = [sys.executable, "-m", "dspark_cli.cli", "bench", "bench=cpu", "+hw=cpu",
            *settings, *extra, f"hydra.run.dir={run_dir}", "--json"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    if not done.stdout.strip():
        sys.exit(f"dspark bench failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def preload_of(run_dir: Path) -> str:
    """The LD_PRELOAD the run record says the servers got."""
    for launch in sorted(run_dir.glob("arms/*/launch.sh")):
        for line in launch.read_text().splitlines():
            if line.startswith("export LD_PRELOAD="):
                return line.split("=", 1)[1]
    return "(none)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    args, extra = parser.parse_known_args()
    tput: dict[tuple[str, str], list[float]] = defaultdict(list)
    warnings: dict[str, list[int]] = defaultdict(list)
    preload: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="cpu-preload-") as tmp:
        for r in range(args.rounds):
            order = list(SETTINGS) if r % 2 == 0 else list(reversed(SETTINGS))
            for name in order:
                run_dir = Path(tmp) / f"{name}-{r}"
                out = run_bench(run_dir, SETTINGS[name], extra)
                preload[name] = preload_of(run_dir)
                for cell in out["cells"]:
                    key = f"{cell['arm']}-c{cell['concurrency']}"
                    if not cell["valid"] or cell["output_throughput"] is None:
                        sys.exit(f"{name}: cell {key} invalid: {cell['reasons']}")
                    tput[(key, name)].append(cell["output_throughput"])
                warnings[name] += [log.read_text().count(WARNING)
                                   for log in run_dir.glob("cells/*/server.log")]
    for name in SETTINGS:
        print(f"{name:>8} preload: LD_PRELOAD={preload[name]}; vLLM's '{WARNING}' warnings per "
              f"server log: {sorted(set(warnings[name]))}")
    print(f"\n{'cell':<18}{'without tok/s':>15}{'with tok/s':>13}{'with/without':>14}"
          f"   (median of {args.rounds} round(s))")
    for key in sorted({k for k, _ in tput}):
        without = statistics.median(tput[(key, "without")])
        with_ = statistics.median(tput[(key, "with")])
        print(f"{key:<18}{without:>15.1f}{with_:>13.1f}{with_ / without:>14.2f}")


if __name__ == "__main__":
    main()
