"""The statistics behind the bench's claims (pure, no I/O): a mean with its Student t interval
over repeats, a speedup ratio with its Fieller interval and a verdict, and the results sentence
the report prints. "Comparable" and "faster" are computed here, never written by hand.

Every repeat of a cell is its own cold boot, so repeats are independent samples of the cell's
throughput; an arm and its baseline are independent samples of each other.
"""

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


class Verdict(StrEnum):
    """The words the report prints."""

    FASTER = "faster"
    SLOWER = "slower"
    COMPARABLE = "comparable"
    CANNOT_TELL = "cannot tell"


@dataclass(frozen=True)
class Speedup:
    """An arm's throughput over the baseline's at one concurrency, with its interval."""

    arm: str
    baseline: str
    concurrency: int
    ratio: Interval  # arm mean / baseline mean; n is the smaller of the two arms' repeats
    verdict: Verdict
    margin: float = 0.0  # the equivalence margin the verdict used

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "baseline": self.baseline, "concurrency": self.concurrency,
                "ratio": self.ratio.to_dict(), "verdict": str(self.verdict),
                "margin": self.margin}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Speedup:
        return cls(str(data["arm"]), str(data["baseline"]), int(data["concurrency"]),
                   Interval.from_dict(data["ratio"]), Verdict(data["verdict"]),
                   float(data.get("margin", 0.0)))


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


@lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """Student t's p-quantile (p in (0.5, 1)) for any real df > 0: safeguarded Newton on the
    upper tail P(T > t) = I_{df/(df+t^2)}(df/2, 1/2) / 2 (mpmath's regularized incomplete
    beta), started from the Cornish-Fisher expansion and kept inside a bracket."""
    if not 0.5 < p < 1 or not df > 0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df > 0, got p={p}, df={df}")
    import mpmath

    q = 1 - p
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def excess(t: float) -> float:  # upper tail minus q: positive while t is too small
        return float(mpmath.betainc(df / 2, 0.5, 0, df / (df + t * t), regularized=True)) / 2 - q

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
    va, vb = variance(a_xs) / len(a_xs), variance(b_xs) / len(b_xs)  # variances of the means
    if va + vb == 0:
        return Interval(r, r, r, n, confidence)
    df = (va + r * r * vb) ** 2 / (va**2 / (len(a_xs) - 1) + (r * r * vb) ** 2 / (len(b_xs) - 1))
    t2 = t_quantile((1 + confidence) / 2, df) ** 2
    # (a - R b)^2 <= t^2 (va + R^2 vb)  <=>  A R^2 - 2ab R + C <= 0
    big_a, c = b * b - t2 * vb, a * a - t2 * va
    if big_a <= 0 or c <= 0:
        return Interval(r, None, None, n, confidence)
    root = math.sqrt(max(a * a * b * b - big_a * c, 0.0))
    return Interval(r, (a * b - root) / big_a, (a * b + root) / big_a, n, confidence)


def verdict_of(ratio: Interval, margin: float) -> Verdict:
    """Faster or slower when the interval excludes 1 and the estimate is beyond the equivalence
    margin; comparable when it holds 1 or the change is within the margin; cannot tell without
    an interval."""
    if ratio.low is None or ratio.high is None:
        return Verdict.CANNOT_TELL
    if ratio.low <= 1 <= ratio.high or abs(ratio.estimate - 1) <= margin:
        return Verdict.COMPARABLE
    return Verdict.FASTER if ratio.low > 1 else Verdict.SLOWER


def speedup(arm: str, arm_values: Sequence[float], baseline: str, base_values: Sequence[float],
            concurrency: int, margin: float, confidence: float = CONFIDENCE) -> Speedup:
    """The arm's throughput over the baseline's (each value one repeat's), judged."""
    if not 0 <= margin < 1:
        raise ValueError(f"speedup: the equivalence margin must be in [0, 1), got {margin}")
    ratio = ratio_interval(arm_values, base_values, confidence)
    return Speedup(arm, baseline, concurrency, ratio, verdict_of(ratio, margin), margin)


def _concurrencies(cs: Sequence[int]) -> str:
    words = [str(c) for c in cs]
    if len(words) == 1:
        return f"concurrency {words[0]}"
    return f"concurrencies {', '.join(words[:-1])} and {words[-1]}"


def _ratios(group: Sequence[Speedup]) -> str:
    estimates = sorted(s.ratio.estimate for s in group)
    if len(estimates) > 1 and f"{estimates[0]:.2f}" != f"{estimates[-1]:.2f}":
        return f"{estimates[0]:.2f}x to {estimates[-1]:.2f}x"
    if len(estimates) == 1:
        s = group[0]
        if s.ratio.low is None or s.ratio.high is None:
            return f"{s.ratio.estimate:.2f}x"
        return f"{s.ratio.estimate:.2f}x, {s.ratio.confidence:.0%} interval " \
               f"{s.ratio.low:.2f}x to {s.ratio.high:.2f}x"
    return f"{estimates[0]:.2f}x"


def _phrase(verdict: Verdict, group: Sequence[Speedup]) -> str:
    where = _concurrencies([s.concurrency for s in group])
    why = ""
    if verdict is Verdict.CANNOT_TELL:
        why = "; fewer than two repeats" if min(s.ratio.n for s in group) < 2 \
            else "; the repeats vary too much to bound the ratio"
    return f"{verdict} at {where} ({_ratios(group)}{why})"


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
        sentences.append(f"{arm} over {baseline}: {'; '.join(phrases)} ({levels} intervals over "
                         f"{_repeats(mine)}; equivalence margin {margins}).")
    return " ".join(sentences)
