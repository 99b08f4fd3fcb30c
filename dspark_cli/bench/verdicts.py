"""What a speedup means, decided one way for every command that compares throughputs (pure).

"comparable" is an equivalence claim, so it comes only from a test of equivalence: the two
one-sided tests at 5% each, i.e. the ratio's 90% interval inside [1 - m, 1 + m]. "faster" and
"slower" need the 95% interval to exclude 1 and the estimate to lie beyond the margin.
Anything else is "inconclusive", stated with the smallest change the run could have seen (its
minimum detectable effect at 80% power), so a noisy run never reads as a result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from statistics import fmean, variance
from typing import Any

from dspark_cli.bench.stats import CONFIDENCE, Interval, ratio_interval, t_quantile
from dspark_cli.compat import StrEnum

EQUIVALENCE_CONFIDENCE = 0.90  # two one-sided tests at 5% each
POWER = 0.80  # the minimum detectable effect's chance of being seen


class Verdict(StrEnum):
    """The words the report prints."""

    FASTER = "faster"
    SLOWER = "slower"
    COMPARABLE = "comparable"
    INCONCLUSIVE = "inconclusive"

    @classmethod
    def read(cls, word: str) -> Verdict:
        """A recorded verdict; records from before the equivalence test said "cannot tell"."""
        return cls.INCONCLUSIVE if word == "cannot tell" else cls(word)


@dataclass(frozen=True)
class Speedup:
    """An arm's throughput over the baseline's at one concurrency, judged."""

    arm: str
    baseline: str
    concurrency: int
    ratio: Interval  # arm mean / baseline mean, 95%; n is the smaller of the two arms' repeats
    verdict: Verdict
    margin: float = 0.0  # the equivalence margin the verdict used
    equivalence: Interval | None = None  # the ratio's 90% interval (the equivalence test's)
    mde: float | None = None  # the smallest change (a fraction) the run could have seen

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "baseline": self.baseline, "concurrency": self.concurrency,
                "ratio": self.ratio.to_dict(), "verdict": str(self.verdict),
                "margin": self.margin,
                "equivalence": None if self.equivalence is None else self.equivalence.to_dict(),
                "mde": self.mde}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Speedup:
        eq, mde = data.get("equivalence"), data.get("mde")
        return cls(str(data["arm"]), str(data["baseline"]), int(data["concurrency"]),
                   Interval.from_dict(data["ratio"]), Verdict.read(str(data["verdict"])),
                   float(data.get("margin", 0.0)), None if eq is None else Interval.from_dict(eq),
                   None if mde is None else float(mde))


def min_detectable(num: Sequence[float], den: Sequence[float], confidence: float = CONFIDENCE,
                   power: float = POWER) -> float | None:
    """The smallest relative change of mean(num) / mean(den) that a two-sided test at
    `confidence` sees with probability `power`, from the repeats' noise: (t_(1-a/2) + t_power)
    times the ratio's relative standard error (Welch's degrees of freedom). None below two
    repeats on either side, where there is no noise to measure."""
    if min(len(num), len(den)) < 2:
        return None
    a, b = fmean(num), fmean(den)
    if a <= 0 or b <= 0:
        return None
    # relative variances of the means, from each sample over its mean (no underflow at any rate)
    ra = variance([x / a for x in num]) / len(num)
    rb = variance([x / b for x in den]) / len(den)
    if ra + rb == 0:
        return 0.0
    welch = ra**2 / (len(num) - 1) + rb**2 / (len(den) - 1)
    df = min((ra + rb) ** 2 / welch, 1e6) if welch > 0 else 1e6
    return (t_quantile((1 + confidence) / 2, df) + t_quantile(power, df)) * math.sqrt(ra + rb)


def verdict_of(ratio: Interval, equivalence: Interval | None, margin: float) -> Verdict:
    """Comparable when the 90% interval lies inside [1 - margin, 1 + margin]; faster or slower
    when the 95% interval excludes 1 and the estimate is beyond the margin; else inconclusive."""
    if equivalence is not None and equivalence.low is not None and equivalence.high is not None \
            and 1 - margin <= equivalence.low and equivalence.high <= 1 + margin:
        return Verdict.COMPARABLE
    if ratio.low is not None and ratio.high is not None and abs(ratio.estimate - 1) > margin:
        if ratio.low > 1:
            return Verdict.FASTER
        if ratio.high < 1:
            return Verdict.SLOWER
    return Verdict.INCONCLUSIVE


def speedup(arm: str, arm_values: Sequence[float], baseline: str, base_values: Sequence[float],
            concurrency: int, margin: float) -> Speedup:
    """The arm's throughput over the baseline's (each value one repeat's), judged."""
    if not 0 <= margin < 1:
        raise ValueError(f"speedup: the equivalence margin must be in [0, 1), got {margin}")
    ratio = ratio_interval(arm_values, base_values, CONFIDENCE)
    equivalence = ratio_interval(arm_values, base_values, EQUIVALENCE_CONFIDENCE)
    return Speedup(arm, baseline, concurrency, ratio, verdict_of(ratio, equivalence, margin),
                   margin, equivalence, min_detectable(arm_values, base_values))


def words(s: Speedup) -> str:
    """The verdict for a table cell: an inconclusive one with the change it could have seen."""
    if s.verdict is Verdict.INCONCLUSIVE and s.mde is not None:
        return f"{s.verdict} (min. detectable {s.mde:.0%})"
    return str(s.verdict)


def _concurrencies(cs: Sequence[int]) -> str:
    words = [str(c) for c in cs]
    if len(words) == 1:
        return f"concurrency {words[0]}"
    return f"concurrencies {', '.join(words[:-1])} and {words[-1]}"


def _span(values: Sequence[float], fmt: str, unit: str) -> str:
    lo, hi = format(min(values), fmt) + unit, format(max(values), fmt) + unit
    return lo if lo == hi else f"{lo} to {hi}"


def _ratios(verdict: Verdict, group: Sequence[Speedup]) -> str:
    """One speedup: its estimate with the interval its verdict rests on; several: the span."""
    if len(group) > 1:
        return _span([s.ratio.estimate for s in group], ".2f", "x")
    s = group[0]
    iv = s.equivalence if verdict is Verdict.COMPARABLE and s.equivalence else s.ratio
    if iv.low is None or iv.high is None:
        return f"{s.ratio.estimate:.2f}x"
    return f"{s.ratio.estimate:.2f}x, {iv.confidence:.0%} interval {iv.low:.2f}x to {iv.high:.2f}x"


def _why_inconclusive(group: Sequence[Speedup]) -> str:
    if min(s.ratio.n for s in group) < 2:
        return "fewer than two repeats"
    mdes = [s.mde for s in group if s.mde is not None]
    if not mdes:
        return "the repeats vary too much to bound the ratio"
    return f"smallest detectable change {_span([100 * m for m in mdes], '.0f', '%')}"


def _phrase(verdict: Verdict, group: Sequence[Speedup]) -> str:
    where = _concurrencies([s.concurrency for s in group])
    why = f"; {_why_inconclusive(group)}" if verdict is Verdict.INCONCLUSIVE else ""
    return f"{verdict} at {where} ({_ratios(verdict, group)}{why})"


def _repeats(group: Sequence[Speedup]) -> str:
    ns = sorted({s.ratio.n for s in group})
    count = str(ns[0]) if len(ns) == 1 else f"{ns[0]} to {ns[-1]}"
    return f"{count} repeat{'s' if ns[-1] != 1 else ''}"


def results_sentence(speedups: Sequence[Speedup]) -> str:
    """The report's results claim, one sentence per arm: its verdict words over the baseline
    by ascending concurrency (runs of one verdict merged), with the ratios that support them."""
    if not speedups:
        return "No speedup was measured: no arm has a valid cell beside a valid baseline cell."
    sentences = []
    for arm, baseline in sorted({(s.arm, s.baseline) for s in speedups}):
        mine = sorted((s for s in speedups if (s.arm, s.baseline) == (arm, baseline)),
                      key=lambda s: s.concurrency)
        phrases = [_phrase(v, list(g)) for v, g in groupby(mine, key=lambda s: s.verdict)]
        levels = "/".join(sorted({f"{s.ratio.confidence:.0%}" for s in mine}))
        margins = "/".join(f"{m:.0%}" for m in sorted({s.margin for s in mine}))
        sentences.append(
            f"{arm} over {baseline}: {'; '.join(phrases)} ({levels} intervals over "
            f"{_repeats(mine)}; comparable only when the {EQUIVALENCE_CONFIDENCE:.0%} interval "
            f"lies within the equivalence margin of {margins}).")
    return " ".join(sentences)
