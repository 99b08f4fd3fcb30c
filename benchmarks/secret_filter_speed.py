"""The secret filter (`launch/secrets.py`: URL passwords found and redacted, then known values
replaced: `Scrubber`) on 1 MB single-line texts, against references in the same run.

Texts (each one line of 1 MB): letters only (what made the old pattern quadratic: a URL
scheme tried from every position), `a://b:` runs with no `@`, 10,000 real `user:pass@` URLs,
and colons. References, measured on the same text:
- `str.replace` of one value over the text (a linear pass in C: the floor);
- the old pattern (`[A-Za-z][A-Za-z0-9+.-]*://...`, `re.sub`) on the first 20 KB only (its
  time grows with the square of the length; the 1 MB figure it implies is printed).
Goal: every 1 MB text filtered in under 0.5 s; exits 1 when one misses.
Usage: .venv/bin/python benchmarks/secret_filter_speed.py [--runs 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
GOAL_S = 0.5
SIZE = 1_000_000
OLD_SIZE = 20_000
OLD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(?!\$[{(])([^/\s@]+)(?=@)")


def median_s(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def texts() -> dict[str, str]:
    def fill(unit: str) -> str:
        return (unit * (SIZE // len(unit) + 1))[:SIZE]

    return {"letters": fill("a"), "schemes without @": fill("a://b:"),
            "real URLs": fill("see https://me:pw-123456@host.example/x "),
            "colons": fill(":")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    from dspark_cli.launch.secrets import Scrubber

    scrub = Scrubber(["pw-123456", "sekrit-value"])
    missed = False
    print(f"{'text (1 MB, one line)':<22} {'filter':>9} {'str.replace':>12} "
          f"{'old, 20 KB':>11} {'old, 1 MB (implied)':>20}")
    for name, text in texts().items():
        new = median_s(lambda t=text: scrub(t), args.runs)
        floor = median_s(lambda t=text: t.replace("sekrit-value", "<redacted>"), args.runs)
        head = text[:OLD_SIZE]
        old = median_s(lambda t=head: OLD.sub(lambda m: m.group(1) + "<redacted>", t), 1)
        implied = old * (SIZE / OLD_SIZE) ** 2 if old > 0.01 else old * SIZE / OLD_SIZE
        missed |= new >= GOAL_S
        print(f"{name:<22} {new:>8.3f}s {floor:>11.4f}s {old:>10.3f}s {implied:>19.0f}s")
    print(f"goal: every text under {GOAL_S} s: {'missed' if missed else 'met'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
