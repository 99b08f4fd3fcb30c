"""The arm to run at each load (pure): the best goodput (throughput when the protocol names no
objective), named only where the shared verdict (`stats.speedup`) says it is faster than
every other arm measured there; "no clear winner" otherwise, with the verdict that stopped it.
A load without a clear winner keeps the baseline, unless the intervals call the baseline slower
than another arm there (then the best arm, which no interval can call slower): a proposal never
routes a load to an arm its own intervals call slower.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from dspark_cli.bench import stats

GOODPUT = "output goodput"
THROUGHPUT = "output throughput"


@dataclass(frozen=True)
class Winner:
    concurrency: int
    arm: str | None  # None: no clear winner
    metric: str  # GOODPUT or THROUGHPUT
    best: str | None  # the arm with the highest mean, winner or not
    runner_up: stats.Speedup | None  # best over the closest other arm, judged
    note: str  # why there is no winner, or ""
    kept: str | None = None  # without a clear winner: the arm a proposal keeps (see above)

    @property
    def words(self) -> str:
        return self.arm if self.arm else "no clear winner"

    @property
    def routed(self) -> str | None:
        """The arm a proposal serves this load with: the winner, else the one kept."""
        return self.arm or self.kept

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "arm": self.arm, "metric": self.metric,
                "best": self.best, "note": self.note, "kept": self.kept,
                "runner_up": None if self.runner_up is None else self.runner_up.to_dict()}


def _against(best: str, best_v: Sequence[float], other: str, other_v: Sequence[float],
             concurrency: int, margin: float) -> stats.Speedup | None:
    """best over other; None when other's mean is zero (no ratio: best wins when its own
    interval is above zero)."""
    if fmean(other_v) > 0:
        return stats.speedup(best, best_v, other, other_v, concurrency, margin)
    return None


def _kept(here: Sequence[tuple[str, tuple[float, ...]]], baseline: str | None, c: int,
          margin: float) -> str | None:
    """At a load without a clear winner (`here`: the valid arms, best first): the baseline,
    unless an arm there is faster than it (then the best arm, whose mean is the highest)."""
    if baseline is None:
        return None
    base = dict(here).get(baseline)
    if base is None:  # no valid baseline repeat: no interval calls it slower
        return baseline
    for arm, values in here:
        if arm == baseline:
            continue
        if fmean(base) > 0:
            beaten = stats.speedup(arm, values, baseline, base, c,
                                      margin).verdict is stats.Verdict.FASTER
        else:  # the baseline measured nothing: beaten by an arm bounded above zero
            low = stats.mean_interval(values).low
            beaten = low is not None and low > 0
        if beaten:
            return here[0][0]
    return baseline


def pick(measured: Sequence[tuple[str, int, Sequence[float]]], concurrencies: Sequence[int],
         margin: float, metric: str, baseline: str | None = None) -> tuple[Winner, ...]:
    """One Winner per concurrency from (arm, concurrency, valid repeats' values); `baseline`:
    the arm a load without a clear winner keeps (`_kept`)."""
    out = []
    for c in concurrencies:
        here = [(a, tuple(v)) for a, cc, v in measured if cc == c and v]
        here.sort(key=lambda av: fmean(av[1]), reverse=True)
        if len(here) < 2:
            measured_here = any(cc == c for _, cc, _ in measured)
            out.append(Winner(c, None, metric, here[0][0] if here else None, None,
                              "fewer than two arms with valid repeats" if measured_here
                              else "not measured", _kept(here, baseline, c, margin)))
            continue
        (best, best_v), others = here[0], here[1:]
        judged = [(o, _against(best, best_v, o, ov, c, margin)) for o, ov in others]
        runner_up = judged[0][1]
        blocked = ""
        for other, s in judged:
            if s is None:
                low = stats.mean_interval(best_v).low
                if low is None or low <= 0:
                    blocked = f"{best} over {other} (zero): not bounded above zero"
            elif s.verdict is not stats.Verdict.FASTER:
                blocked = f"{best} over {other}: {stats.words(s)} ({s.ratio.estimate:.3f}x)"
            if blocked:
                break
        out.append(Winner(c, None if blocked else best, metric, best, runner_up, blocked,
                          _kept(here, baseline, c, margin) if blocked else None))
    return tuple(out)


def ranges(winners: Sequence[Winner]) -> list[tuple[int, int, str]]:
    """Consecutive concurrencies (ascending) served by the same arm (`Winner.routed`: the
    winner, else the arm kept) merged into inclusive load ranges (start, end, arm); a range
    ends at its last measured concurrency, the next starts one above it, the first at 1. A load
    with no arm to route to (nothing measured) is left out."""
    named = sorted((w for w in winners if w.routed), key=lambda w: w.concurrency)
    out: list[tuple[int, int, str]] = []
    for w in named:
        arm = str(w.routed)
        if out and out[-1][2] == arm:
            out[-1] = (out[-1][0], w.concurrency, arm)
        else:
            out.append((out[-1][1] + 1 if out else 1, w.concurrency, arm))
    return out
