"""The arm to run at each load (pure): the best goodput (throughput when the protocol names no
objective), named only where the shared verdict (`verdicts.speedup`) says it is faster than
every other arm measured there; "no clear winner" otherwise, with the verdict that stopped it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from dspark_cli.bench import stats, verdicts

GOODPUT = "output goodput"
THROUGHPUT = "output throughput"


@dataclass(frozen=True)
class Winner:
    concurrency: int
    arm: str | None  # None: no clear winner
    metric: str  # GOODPUT or THROUGHPUT
    best: str | None  # the arm with the highest mean, winner or not
    runner_up: verdicts.Speedup | None  # best over the closest other arm, judged
    note: str  # why there is no winner, or ""

    @property
    def words(self) -> str:
        return self.arm if self.arm else "no clear winner"

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "arm": self.arm, "metric": self.metric,
                "best": self.best, "note": self.note,
                "runner_up": None if self.runner_up is None else self.runner_up.to_dict()}


def _against(best: str, best_v: Sequence[float], other: str, other_v: Sequence[float],
             concurrency: int, margin: float) -> verdicts.Speedup | None:
    """best over other; None when other's mean is zero (no ratio: best wins when its own
    interval is above zero)."""
    if fmean(other_v) > 0:
        return verdicts.speedup(best, best_v, other, other_v, concurrency, margin)
    return None


def pick(measured: Sequence[tuple[str, int, Sequence[float]]], concurrencies: Sequence[int],
         margin: float, metric: str) -> tuple[Winner, ...]:
    """One Winner per concurrency from (arm, concurrency, valid repeats' values)."""
    out = []
    for c in concurrencies:
        here = [(a, tuple(v)) for a, cc, v in measured if cc == c and v]
        if len(here) < 2:
            measured_here = any(cc == c for _, cc, _ in measured)
            out.append(Winner(c, None, metric, here[0][0] if here else None, None,
                              "fewer than two arms with valid repeats" if measured_here
                              else "not measured"))
            continue
        here.sort(key=lambda av: fmean(av[1]), reverse=True)
        (best, best_v), others = here[0], here[1:]
        judged = [(o, _against(best, best_v, o, ov, c, margin)) for o, ov in others]
        runner_up = judged[0][1]
        blocked = ""
        for other, s in judged:
            if s is None:
                low = stats.mean_interval(best_v).low
                if low is None or low <= 0:
                    blocked = f"{best} over {other} (zero): not bounded above zero"
            elif s.verdict is not verdicts.Verdict.FASTER:
                blocked = f"{best} over {other}: {verdicts.words(s)} ({s.ratio.estimate:.3f}x)"
            if blocked:
                break
        out.append(Winner(c, None if blocked else best, metric, best, runner_up, blocked))
    return tuple(out)


def ranges(winners: Sequence[Winner]) -> list[tuple[int, int, str]]:
    """Consecutive concurrencies (ascending) with the same winner merged into inclusive load
    ranges (start, end, arm); a range ends at its last measured concurrency, the next starts
    one above it, the first at 1. Loads without a clear winner are left out."""
    named = sorted((w for w in winners if w.arm), key=lambda w: w.concurrency)
    out: list[tuple[int, int, str]] = []
    for w in named:
        if out and out[-1][2] == w.arm:
            out[-1] = (out[-1][0], w.concurrency, w.arm)
        else:
            out.append((out[-1][1] + 1 if out else 1, w.concurrency, w.arm))
    return out
