"""The intervals behind the bench's claims (pure, no I/O): a mean with its Student t interval
over repeats and a throughput ratio with its Fieller interval. `verdicts.py` judges them.

Every repeat of a cell is its own cold boot, so repeats are independent samples of the cell's
throughput; an arm and its baseline are independent samples of each other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist, fmean, variance
from typing import Any

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
