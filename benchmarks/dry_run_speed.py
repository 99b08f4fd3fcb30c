"""`dspark serve +hw=mi350x --dry-run` against `python -c "import hydra"`, in the same run.

Goal: the dry run's median wall time is at most 1.6x the bare Hydra import's (it composes the
config, plans, checks and renders on top of that import, and imports neither torch nor vLLM).
"warm" is the usual case (this composition is in dspark's compose cache); "cold" gives every
run an empty cache, so it pays Hydra's full composition.
Usage: .venv/bin/python benchmarks/dry_run_speed.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOAL = 1.6
DRY_RUN = [sys.executable, "-m", "dspark_cli.cli", "serve", "+hw=mi350x", "--dry-run"]
COMMANDS = {
    "import hydra": ([sys.executable, "-c", "import hydra"], False),
    "dspark serve +hw=mi350x --dry-run": (DRY_RUN, False),
    "  same, cold compose cache": (DRY_RUN, True),
}


def wall(argv: list[str], cold: bool) -> float:
    with tempfile.TemporaryDirectory() as empty:
        env = {**os.environ, "DSPARK_CACHE_DIR": empty} if cold else None
        start = time.perf_counter()
        subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env=env)
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    for argv, cold in COMMANDS.values():  # warm the page cache, .pyc files and compose cache
        wall(argv, cold)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(runs):  # interleaved, so drift hits both alike
        for name, (argv, cold) in COMMANDS.items():
            times[name].append(wall(argv, cold))
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, median in medians.items():
        print(f"{name:<36} median {median * 1000:7.1f} ms  "
              f"(min {min(times[name]) * 1000:.1f}, max {max(times[name]) * 1000:.1f}, n={runs})")
    ratio = medians["dspark serve +hw=mi350x --dry-run"] / medians["import hydra"]
    cold = medians["  same, cold compose cache"] / medians["import hydra"]
    verdict = "meets" if ratio <= GOAL else "MISSES"
    print(f"ratio {ratio:.2f}x ({verdict} the {GOAL}x goal); cold cache {cold:.2f}x")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
