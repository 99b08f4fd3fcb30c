"""What lm-evaluation-harness beside vLLM costs every vLLM process: the imports a server and a
load generator start with, in vLLM's venv as `make setup` leaves it (lm_eval in `.venv-eval`),
against the same venv with lm_eval's packages importable too (`.venv-eval`'s site-packages on
PYTHONPATH: scikit-learn, SciPy, datasets and the rest, pinned alike), in the same run.

    .venv/bin/python benchmarks/eval_venv_imports.py [--rounds 3]

Each round imports each set once each way, alternating which goes first; the figure is the
child's CPU time (user + system), which is what two busy cores run short of. Prints the median
of each way and the difference.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EVAL_SITE = REPO / ".venv-eval" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" \
    / "site-packages"
# A server's first import (its API server, and much the same in its engine core) and a load
# generator's (what `vllm bench serve` imports at its start).
IMPORTS = {
    "server": "import vllm.entrypoints.openai.api_server",
    "loadgen": "import vllm.entrypoints.cli.main, vllm.entrypoints.cli.benchmark.main, "
               "vllm.benchmarks.serve",
}
PROBE = "import importlib.util as u; print(u.find_spec('sklearn') is not None)"


def env_for(way: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if way == "with lm_eval":
        env["PYTHONPATH"] = str(EVAL_SITE)
    return env


def cpu_seconds(code: str, env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    if not EVAL_SITE.is_dir():
        sys.exit(f"no {EVAL_SITE}: run `make setup` first")
    ways = ("without", "with lm_eval")
    for way in ways:
        found = subprocess.run([sys.executable, "-c", PROBE], env=env_for(way), check=True,
                               capture_output=True, text=True).stdout.strip()
        print(f"{way}: scikit-learn importable: {found}")
    for name, code in IMPORTS.items():
        times: dict[str, list[float]] = {way: [] for way in ways}
        for r in range(rounds):
            for way in (ways if r % 2 == 0 else ways[::-1]):
                times[way].append(cpu_seconds(code, env_for(way)))
            print(f"{name} round {r + 1}: " + ", ".join(f"{w} {times[w][-1]:.2f} s"
                                                         for w in ways))
        median = {way: statistics.median(t) for way, t in times.items()}
        extra = median["with lm_eval"] - median["without"]
        print(f"{name}: median CPU {median['without']:.2f} s without, "
              f"{median['with lm_eval']:.2f} s with lm_eval's packages "
              f"(+{extra:.2f} s, {extra / median['without']:.0%})")


if __name__ == "__main__":
    main()
