"""The intervals behind the bench's claims (pure, no I/O): a mean with its Student t interval
over repeats and a throughput ratio with its Fieller interval. Below, the verdict that judges them.

Every repeat of a cell is its own cold boot, so repeats are independent samples of the cell's
throughput; an arm and its baseline are independent samples of each other.

What a speedup means, decided one way for every command that compares throughputs (pure).

"comparable" is an equivalence claim, so it comes only from a test of equivalence: the two
one-sided tests at 5% each, i.e. the ratio's 90% interval inside [1 - m, 1 + m]. "faster" and
"slower" need the 95% interval to exclude 1 and the estimate to lie beyond the margin.
Anything else is "inconclusive", stated with the smallest change the run could have seen (its
minimum detectable effect at 80% power), so a noisy run never reads as a result."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import groupby
from statistics import NormalDist, fmean, variance
from typing import Any

from dspark_cli.compat import StrEnum

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """A point estimate with its two-sided interval; low/high None when n < 2 (no spread to
    measure) or when the data cannot bound it (a ratio whose denominator may be zero)."""

    estimate: float
    low: float | None
    high: float | None
    n: int
    confidence: float = CONFIDENCE

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    def to_dict(self) -> dict[str, Any]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "n": self.n,
                "confidence": self.confidence}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Interval:
        return cls(float(data["estimate"]), _opt_float(data.get("low")),
                   _opt_float(data.get("high")), int(data["n"]),
                   float(data.get("confidence", CONFIDENCE)))


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b): its continued fraction (modified Lentz), on
    the side of the symmetry I_x(a, b) = 1 - I_(1-x)(b, a) where it converges fast."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1 - incomplete_beta(b, a, 1 - x)
    tiny = 1e-300
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x)) / a
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1) < 1e-15:
            break
    return front * f


@lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """Student t's p-quantile (p in (0.5, 1)) for any real df > 0: safeguarded Newton on the
    upper tail P(T > t) = I_{df/(df+t^2)}(df/2, 1/2) / 2, started from the Cornish-Fisher
    expansion and kept inside a bracket. Fast enough for thousands of seeded trials."""
    if not 0.5 < p < 1 or not df > 0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df > 0, got p={p}, df={df}")
    q = 1 - p
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def excess(t: float) -> float:  # upper tail minus q: positive while t is too small
        return incomplete_beta(df / 2, 0.5, df / (df + t * t)) / 2 - q

    def density(t: float) -> float:
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))

    lo, hi = 0.0, 1.0
    while excess(hi) > 0:
        lo, hi = hi, hi * 2
    z = NormalDist().inv_cdf(p)
    t = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    t = t if lo < t < hi else (lo + hi) / 2
    for _ in range(200):
        f = excess(t)
        if f == 0:
            return t
        lo, hi = (t, hi) if f > 0 else (lo, t)
        new = t + f / density(t)
        if not lo < new < hi:
            new = (lo + hi) / 2
        if abs(new - t) <= 1e-12 * t:
            return new
        t = new
    return t


def _check(values: Sequence[float], what: str) -> list[float]:
    out = [float(v) for v in values]
    if not out:
        raise ValueError(f"{what}: no values")
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"{what}: a value is not finite: {out}")
    return out


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The mean and its Student t interval (n - 1 degrees of freedom)."""
    xs = _check(values, "mean_interval")
    mean, n = fmean(xs), len(xs)
    if n < 2:
        return Interval(mean, None, None, n, confidence)
    half = t_quantile((1 + confidence) / 2, n - 1) * math.sqrt(variance(xs) / n)
    return Interval(mean, mean - half, mean + half, n, confidence)


_MAX_DF = 1e6  # Welch's degrees of freedom beyond which t is the normal quantile


def ratio_interval(num: Sequence[float], den: Sequence[float],
                   confidence: float = CONFIDENCE) -> Interval:
    """mean(num) / mean(den) with Fieller's interval for independent samples, with Welch's
    degrees of freedom at the estimate. Unbounded (None, None) when either mean is not
    significantly above zero: no finite interval then holds the ratio (the denominator) or its
    inverse (the numerator), and a throughput ratio is only read between positive rates."""
    a_xs, b_xs = _check(num, "ratio numerator"), _check(den, "ratio denominator")
    a, b = fmean(a_xs), fmean(b_xs)
    if b <= 0:
        raise ValueError(f"ratio_interval: the denominator's mean must be positive, got {b}")
    r, n = a / b, min(len(a_xs), len(b_xs))
    if n < 2:
        return Interval(r, None, None, n, confidence)
    # Fieller's interval scales with the data: computed on each sample over its mean (near 1),
    # so rates read back at any magnitude neither underflow nor overflow, then scaled back.
    scale = (a if a > 0 else 1.0) / b
    a_xs = [x / (a if a > 0 else 1.0) for x in a_xs]
    b_xs = [x / b for x in b_xs]
    a, b = fmean(a_xs), 1.0
    r1 = a
    va, vb = variance(a_xs) / len(a_xs), variance(b_xs) / len(b_xs)  # variances of the means
    if va + vb == 0:
        return Interval(r, r, r, n, confidence)
    welch = va**2 / (len(a_xs) - 1) + (r1 * r1 * vb) ** 2 / (len(b_xs) - 1)
    df = min((va + r1 * r1 * vb) ** 2 / welch, _MAX_DF) if welch > 0 else _MAX_DF
    t2 = t_quantile((1 + confidence) / 2, df) ** 2
    # (a - R b)^2 <= t^2 (va + R^2 vb)  <=>  A R^2 - 2ab R + C <= 0
    big_a, c = b * b - t2 * vb, a * a - t2 * va
    if big_a <= 0 or c <= 0:
        return Interval(r, None, None, n, confidence)
    root = math.sqrt(max(a * a * b * b - big_a * c, 0.0))
    return Interval(r, (a * b - root) / big_a * scale, (a * b + root) / big_a * scale, n,
                    confidence)


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
