"""Does an arm answer as well as the baseline? Decided from paired samples (pure).

Every arm answers the same documents, so each arm's score is compared with the baseline's
document by document: the difference of the two accuracies and its interval from the paired
counts (Newcombe's hybrid score interval for paired proportions, 1998, method 10: it keeps its
coverage near 0 and 1 and when no document differs, where a t interval of the per-document
differences would shrink to a point). The words are the bench's (`bench/stats.py`):
"comparable" only from a test of equivalence (the 90% interval inside +/- the margin, two
one-sided tests at 5%); "different" when the 95% interval excludes 0 and the difference passes
the margin; otherwise "inconclusive", with the smallest difference the run could have seen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from dspark_cli.bench.stats import CONFIDENCE, EQUIVALENCE_CONFIDENCE, POWER, Interval
from dspark_cli.compat import StrEnum


class AccuracyVerdict(StrEnum):
    COMPARABLE = "comparable"
    DIFFERENT = "different"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Paired:
    """The documents both arms answered, by who got them right."""

    both: int
    arm_only: int  # the arm right, the baseline wrong
    base_only: int
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.arm_only + self.base_only + self.neither


def pair(arm: Mapping[int, bool], base: Mapping[int, bool]) -> Paired:
    """The counts over the documents both hold (doc id -> answered correctly)."""
    shared = sorted(set(arm) & set(base))
    cells = [(arm[d], base[d]) for d in shared]
    return Paired(cells.count((True, True)), cells.count((True, False)),
                  cells.count((False, True)), cells.count((False, False)))


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf((1 + confidence) / 2)


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    p, z2 = k / n, z * z
    centre, half = p + z2 / (2 * n), z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (centre - half) / (1 + z2 / n), (centre + half) / (1 + z2 / n)


def difference_interval(p: Paired, confidence: float = CONFIDENCE) -> Interval:
    """The arm's accuracy minus the baseline's on the paired documents, with its interval
    (Newcombe 1998, method 10); unbounded when no document was paired."""
    n = p.n
    if n == 0:
        return Interval(0.0, None, None, 0, confidence)
    z = _z(confidence)
    k1, k2 = p.both + p.arm_only, p.both + p.base_only
    p1, p2 = k1 / n, k2 / n
    (l1, u1), (l2, u2) = _wilson(k1, n, z), _wilson(k2, n, z)
    spread = (p.both + p.arm_only) * (p.base_only + p.neither) * k2 * (p.arm_only + p.neither)
    phi = (p.both * p.neither - p.arm_only * p.base_only) / math.sqrt(spread) if spread else 0.0
    below = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2)
                          + (u2 - p2) ** 2))
    above = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2)
                          + (p2 - l2) ** 2))
    d = p1 - p2
    return Interval(d, max(-1.0, d - below), min(1.0, d + above), n, confidence)


def verdict_of(difference: Interval, equivalence: Interval, margin: float) -> AccuracyVerdict:
    lo, hi, eq_lo, eq_hi = difference.low, difference.high, equivalence.low, equivalence.high
    if lo is None or hi is None or eq_lo is None or eq_hi is None:
        return AccuracyVerdict.INCONCLUSIVE
    if -margin <= eq_lo and eq_hi <= margin:
        return AccuracyVerdict.COMPARABLE
    if abs(difference.estimate) > margin and (lo > 0 or hi < 0):
        return AccuracyVerdict.DIFFERENT
    return AccuracyVerdict.INCONCLUSIVE


def min_detectable(difference: Interval, power: float = POWER) -> float | None:
    """The smallest difference a two-sided test at the interval's level sees with probability
    `power`: the interval's half-width scaled from z_(1-a/2) to z_(1-a/2) + z_power."""
    if difference.low is None or difference.high is None:
        return None
    z = _z(difference.confidence)
    return (difference.high - difference.low) / 2 * (z + NormalDist().inv_cdf(power)) / z


@dataclass(frozen=True)
class AccuracyComparison:
    """An arm's accuracy against the baseline's on the documents both answered, judged."""

    arm: str
    baseline: str
    paired: Paired
    difference: Interval  # the arm's accuracy minus the baseline's, 95%
    equivalence: Interval  # the same difference's 90% interval (the equivalence test's)
    verdict: AccuracyVerdict
    margin: float
    mde: float | None

    @property
    def arm_score(self) -> float | None:
        n = self.paired.n
        return (self.paired.both + self.paired.arm_only) / n if n else None

    @property
    def baseline_score(self) -> float | None:
        n = self.paired.n
        return (self.paired.both + self.paired.base_only) / n if n else None

    def to_dict(self) -> dict[str, Any]:
        p = self.paired
        return {"arm": self.arm, "baseline": self.baseline, "documents": p.n,
                "both_correct": p.both, "arm_only": p.arm_only, "baseline_only": p.base_only,
                "neither": p.neither, "difference": self.difference.to_dict(),
                "equivalence": self.equivalence.to_dict(), "verdict": str(self.verdict),
                "margin": self.margin, "mde": self.mde}


def compare(arm: str, arm_correct: Mapping[int, bool], baseline: str,
            base_correct: Mapping[int, bool], margin: float) -> AccuracyComparison:
    """`arm` against `baseline` over the documents both answered, at the equivalence margin
    (an absolute accuracy difference: 0.02 is two points)."""
    if not 0 < margin < 1:
        raise ValueError(f"compare: the margin must be in (0, 1), got {margin}")
    paired = pair(arm_correct, base_correct)
    difference = difference_interval(paired, CONFIDENCE)
    equivalence = difference_interval(paired, EQUIVALENCE_CONFIDENCE)
    return AccuracyComparison(arm, baseline, paired, difference, equivalence,
                              verdict_of(difference, equivalence, margin), margin,
                              min_detectable(difference))


def words(c: AccuracyComparison) -> str:
    """The verdict for a table cell: an inconclusive one with the difference it could see."""
    if c.verdict is AccuracyVerdict.INCONCLUSIVE and c.mde is not None:
        return f"{c.verdict} (min. detectable {100 * c.mde:.1f} points)"
    return str(c.verdict)
