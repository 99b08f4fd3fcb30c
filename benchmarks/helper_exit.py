"""A vLLM verdict helper's exit: `python -m dspark_cli.vllm.parser_check` (its answer, then
`vllm/quick_exit.py`: the atexit handlers, not the interpreter's teardown of vLLM's and torch's
modules) against the same check in a process that exits as Python usually does, in one run.

    .venv/bin/python benchmarks/helper_exit.py [--rounds 5]

Both ask vLLM about the same `vllm serve` argv (a model directory without config.json: the
import, the parser and vLLM's serve-argument checks, no engine config) and must give the same
answer. Each round runs each way once, alternating which goes first; prints the median wall time
and CPU time (the child's user + system) of each way and what the quick exit saves.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUEST = json.dumps(["/nonexistent/model", "--max-model-len", "256"])
WAYS = {
    "quick exit": [sys.executable, "-m", "dspark_cli.vllm.parser_check"],
    "usual exit": [sys.executable, "-c",
                   "import json, sys; from dspark_cli.vllm.parser_check import check; "
                   "print(json.dumps(check(json.loads(sys.stdin.read()))))"],
}


def cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run(argv: list[str]) -> tuple[float, float, dict]:
    wall, before = time.monotonic(), cpu()
    done = subprocess.run(argv, input=REQUEST, capture_output=True, text=True, cwd=REPO,
                          check=True)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return time.monotonic() - wall, cpu() - before, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    walls: dict[str, list[float]] = {way: [] for way in WAYS}
    cpus: dict[str, list[float]] = {way: [] for way in WAYS}
    answers = set()
    for r in range(rounds):
        for way in (list(WAYS) if r % 2 == 0 else list(WAYS)[::-1]):
            wall, used, answer = run(WAYS[way])
            walls[way].append(wall)
            cpus[way].append(used)
            answers.add(json.dumps(answer, sort_keys=True))
        print(f"round {r + 1}: " + ", ".join(f"{w} {walls[w][-1]:.2f} s wall {cpus[w][-1]:.2f} s "
                                             "CPU" for w in WAYS))
    if len(answers) != 1:
        sys.exit(f"the two ways answered differently: {sorted(answers)}")
    med = {w: (statistics.median(walls[w]), statistics.median(cpus[w])) for w in WAYS}
    for w, (wall, used) in med.items():
        print(f"{w}: median {wall:.2f} s wall, {used:.2f} s CPU")
    (qw, qc), (uw, uc) = med["quick exit"], med["usual exit"]
    print(f"the quick exit saves {uw - qw:.2f} s wall and {uc - qc:.2f} s CPU per helper "
          f"(answer: {answers.pop()})")


if __name__ == "__main__":
    main()
