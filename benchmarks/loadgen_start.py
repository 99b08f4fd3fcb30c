"""A load generator phase's start: `vllm bench serve` started afresh (what every phase cost
before) against the same command as a fork of the run's warm vLLM CLI
(bench/loadgen_forks.py), in the same run.

    .venv/bin/python benchmarks/loadgen_start.py [--rounds 3]

The command is `vllm bench serve --help`: all of a phase's start (vLLM's import, its CLI, its
parser) and none of its load. Each round runs it once each way, alternating which goes first;
the warm process's own import, paid once per run, is printed apart. Prints the median of each
way and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from dspark_cli.bench.loadgen_forks import LoadgenForks  # noqa: E402
from dspark_cli.vllm.shim import vllm_command  # noqa: E402

ARGV = ["vllm", "bench", "serve", "--help"]


def cold(log: Path) -> float:
    start = time.monotonic()
    with log.open("wb") as out:
        subprocess.run(vllm_command(ARGV), stdout=out, stderr=subprocess.STDOUT, check=True)
    return time.monotonic() - start


def forked(forks: LoadgenForks, log: Path) -> float:
    start = time.monotonic()
    fork = forks.start(ARGV, {}, log, lambda: sys.exit("the warm vLLM CLI could not start "
                                                       "(is vLLM installed?)"))
    while (code := fork.poll(0.05)) is None:
        pass
    if code != 0:
        sys.exit(f"the forked command exited {code}; see {log}")
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    times: dict[str, list[float]] = {"cold": [], "fork": []}
    with tempfile.TemporaryDirectory() as tmp, LoadgenForks() as forks:
        logs = Path(tmp)
        start = time.monotonic()
        forks.prepare({})
        forked(forks, logs / "first.log")  # waits for the warm process's one import
        print(f"warm process: import and first command {time.monotonic() - start:.2f} s "
              "(once per run)")
        for r in range(rounds):
            order = ("cold", "fork") if r % 2 == 0 else ("fork", "cold")
            for way in order:
                log = logs / f"{way}-{r}.log"
                times[way].append(cold(log) if way == "cold" else forked(forks, log))
            print(f"round {r + 1}: cold {times['cold'][-1]:.2f} s, fork {times['fork'][-1]:.2f} s")
    median = {way: statistics.median(t) for way, t in times.items()}
    print(f"median start of a phase: cold {median['cold']:.2f} s, fork {median['fork']:.2f} s "
          f"({median['cold'] / median['fork']:.1f}x faster)")


if __name__ == "__main__":
    main()
