"""`dspark serve +hw=mi350x --dry-run` against `python -c "import hydra"`, in the same run.

Goal: the dry run's median wall time is at most 2.2x the bare Hydra import's, with nothing
cached (there is no compose cache; every run gets a fresh DSPARK_CACHE_DIR holding only the
installed vLLM's option table, which dspark derives once per vLLM version). On top of that
import it composes once (Hydra's Compose API), plans, checks and renders, and imports neither
torch nor vLLM. Exits 1 when the ratio misses the goal.
Like Hydra's own modules, dspark's run from bytecode: the warm-up writes dspark's .pyc files
as an install does, even where PYTHONDONTWRITEBYTECODE is set (otherwise every run of the
dry run would compile dspark from source while `import hydra` reads Hydra's .pyc files).
Usage: .venv/bin/python benchmarks/dry_run_speed.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REFERENCE, DRY_RUN = "import hydra", "dspark serve +hw=mi350x --dry-run"
COMMANDS = {
    REFERENCE: [sys.executable, "-c", "import hydra"],
    DRY_RUN: [sys.executable, "-m", "dspark_cli.cli", "serve", "+hw=mi350x", "--dry-run"],
}
GOAL = 2.2


def wall(argv: list[str], options: Path, bytecode: bool = False) -> float:
    """Seconds one run takes, its DSPARK_CACHE_DIR holding only the vLLM option table of
    `options` (as on any machine after its first plan); `bytecode`: it may write .pyc files."""
    with tempfile.TemporaryDirectory() as empty:
        env = {**os.environ, "DSPARK_CACHE_DIR": empty}
        if (options / "vllm-options").is_dir():
            shutil.copytree(options / "vllm-options", Path(empty) / "vllm-options")
        if bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        start = time.perf_counter()
        subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env=env)
        return time.perf_counter() - start


def measure(runs: int, options: Path) -> dict[str, list[float]]:
    for argv in COMMANDS.values():  # warm the page cache and the .pyc files
        wall(argv, options, bytecode=True)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(runs):  # interleaved, so drift hits both alike
        for name, argv in COMMANDS.items():
            times[name].append(wall(argv, options))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as options:  # the installed vLLM's table, derived once
        subprocess.run(COMMANDS[DRY_RUN], cwd=REPO, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env={**os.environ, "DSPARK_CACHE_DIR": options})
        times = measure(runs, Path(options))

    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, median in medians.items():
        print(f"{name:<36} median {median * 1000:7.1f} ms  "
              f"(min {min(times[name]) * 1000:.1f}, max {max(times[name]) * 1000:.1f}, n={runs})")
    ratio = medians[DRY_RUN] / medians[REFERENCE]
    verdict = "meets" if ratio <= GOAL else "MISSES"
    print(f"{DRY_RUN:<36} {ratio:.2f}x {REFERENCE} ({verdict} the {GOAL}x goal)")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
