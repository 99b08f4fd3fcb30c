"""`dspark serve +hw=mi350x --dry-run` against `python -c "import hydra"`, in the same run.

Goals: the dry run's median wall time is at most 1.6x the bare Hydra import's when this
composition is in dspark's compose cache (the usual case: a repeated plan), and at most 1.8x
on a first composition (every run gets a fresh, empty DSPARK_CACHE_DIR, so it pays Hydra's full
compose). On top of that import it composes, plans, checks and renders, and imports neither
torch nor vLLM. Exits 1 when either ratio misses its goal.
Like Hydra's own modules, dspark's run from bytecode: the warm-up writes dspark's .pyc files
as an install does, even where PYTHONDONTWRITEBYTECODE is set (otherwise every run of the
dry run would compile dspark from source while `import hydra` reads Hydra's .pyc files).
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
DRY_RUN = [sys.executable, "-m", "dspark_cli.cli", "serve", "+hw=mi350x", "--dry-run"]
REFERENCE = "import hydra"
WARM, COLD = "dspark serve +hw=mi350x --dry-run", "  same, first compose (empty cache)"
COMMANDS = {
    REFERENCE: ([sys.executable, "-c", "import hydra"], False),
    WARM: (DRY_RUN, False),
    COLD: (DRY_RUN, True),
}
GOALS = {WARM: 1.6, COLD: 1.8}


def wall(argv: list[str], cold: bool, bytecode: bool = False) -> float:
    """Seconds one run takes; `bytecode`: it may write .pyc files (the warm-up)."""
    with tempfile.TemporaryDirectory() as empty:
        env = dict(os.environ)
        if cold:
            env["DSPARK_CACHE_DIR"] = empty
        if bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        start = time.perf_counter()
        subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env=env)
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    for argv, cold in COMMANDS.values():  # warm the page cache, .pyc files and compose cache
        wall(argv, cold, bytecode=True)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(runs):  # interleaved, so drift hits both alike
        for name, (argv, cold) in COMMANDS.items():
            times[name].append(wall(argv, cold))
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, median in medians.items():
        print(f"{name:<36} median {median * 1000:7.1f} ms  "
              f"(min {min(times[name]) * 1000:.1f}, max {max(times[name]) * 1000:.1f}, n={runs})")
    missed = 0
    for name, goal in GOALS.items():
        ratio = medians[name] / medians[REFERENCE]
        verdict = "meets" if ratio <= goal else "MISSES"
        missed += ratio > goal
        print(f"{name.strip():<36} {ratio:.2f}x {REFERENCE} ({verdict} the {goal}x goal)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
