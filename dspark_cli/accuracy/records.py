"""The accuracy stage's record (accuracy/accuracy.json): every arm's lm_eval score and which
documents it answered correctly, the settings and the pinned dataset. The comparisons are
recomputed from the per-document results whenever the record is read (`comparisons()`), so an
edited verdict never wins; the file is read back as untrusted input (`untrusted.py`).

Does an arm answer as well as the baseline? Decided from paired samples (pure).

Every arm answers the same documents, so each arm's score is compared with the baseline's
document by document: the difference of the two accuracies and its interval from the paired
counts (Newcombe's hybrid score interval for paired proportions, 1998, method 10: it keeps its
coverage near 0 and 1 and when no document differs, where a t interval of the per-document
differences would shrink to a point). The words are the bench's (`bench/stats.py`):
"comparable" only from a test of equivalence (the 90% interval inside +/- the margin, two
one-sided tests at 5%); "different" when the 95% interval excludes 0 and the difference passes
the margin; otherwise "inconclusive", with the smallest difference the run could have seen."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from dspark_cli.bench.stats import CONFIDENCE, EQUIVALENCE_CONFIDENCE, POWER, Interval
from dspark_cli.compat import StrEnum
from dspark_cli.untrusted import (
    AMOUNT,
    COUNT,
    LIST,
    MAP,
    TEXT,
    RecordError,
    check,
    load_json,
)


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


SCORED = "scored"
FAILED = "failed"

# The fields read back, and their JSON types.
FIELDS = {
    "task": TEXT, "dataset": MAP, "dataset.path": TEXT, "dataset.sha256": TEXT,
    "dataset.documents": COUNT, "baseline": TEXT, "margin": AMOUNT, "model": TEXT,
    "synthetic": TEXT, "settings": MAP, "arms": LIST, "arms.*": MAP, "arms.*.arm": TEXT,
    "arms.*.status": TEXT, "arms.*.reason": TEXT, "arms.*.score": AMOUNT,
    "arms.*.documents": LIST, "arms.*.documents.*": COUNT, "arms.*.correct": LIST,
    "arms.*.correct.*": COUNT, "arms.*.lm_eval_version": TEXT, "arms.*.samples": TEXT,
    "arms.*.cell": TEXT,
}
REQUIRED = ("task", "baseline", "margin", "arms", "arms.*.arm", "arms.*.status")


@dataclass(frozen=True)
class ArmScore:
    """One arm's eval: lm_eval's score and, per document id, whether it answered correctly."""

    arm: str
    status: str  # SCORED or FAILED
    reason: str = ""  # why it failed
    score: float | None = None  # lm_eval's own aggregate (exact_match, strict-match)
    correct: Mapping[int, bool] = field(default_factory=dict)
    lm_eval_version: str | None = None
    samples: str | None = None  # lm_eval's logged samples
    cell: str | None = None  # the bench cell whose server it scored (None: its own boot)

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "status": self.status, "reason": self.reason,
                "score": self.score, "documents": sorted(self.correct),
                "correct": sorted(d for d, ok in self.correct.items() if ok),
                "lm_eval_version": self.lm_eval_version, "samples": self.samples,
                "cell": self.cell}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArmScore:
        documents, right = list(data.get("documents") or ()), set(data.get("correct") or ())
        if not right <= set(documents):
            raise ValueError(f"arm {data['arm']}: correct names documents it did not answer")
        status, reason, score = str(data["status"]), str(data.get("reason") or ""), \
            data.get("score")
        held = held_to_documents(score, len(right), len(documents)) if status == SCORED else ""
        if held:  # a score its own per-document results do not give: not a score
            status, reason = FAILED, held
        return cls(str(data["arm"]), status, reason, score,
                   {int(d): d in right for d in documents},
                   data.get("lm_eval_version"), data.get("samples"), data.get("cell"))


def held_to_documents(score: Any, correct: int, documents: int) -> str:
    """Why a recorded score is not the share of its documents answered correctly ("" when
    it is): lm_eval's exact match over the documents is that share, so a score is recomputed
    from the per-document results, never taken as recorded."""
    if not documents:
        return "no per-document results recorded: its score cannot be recomputed"
    share = correct / documents
    if not isinstance(score, int | float) or isinstance(score, bool) or abs(score - share) > 1e-6:
        return (f"its recorded score {score!r} is not its per-document results' "
                f"{correct} of {documents} ({share:.4f}): the record was edited")
    return ""


@dataclass(frozen=True)
class AccuracyRecord:
    task: str
    dataset: str
    sha256: str
    documents: int  # in the file (the eval may take the first `limit`)
    baseline: str
    margin: float
    model: str  # the served model's name
    synthetic: str | None  # the model profile's synthetic kind: its weights are random
    settings: Mapping[str, Any]
    arms: tuple[ArmScore, ...]

    def comparisons(self) -> tuple[AccuracyComparison, ...]:
        """Every scored arm against the scored baseline, recomputed from the documents."""
        base = next((a for a in self.arms if a.arm == self.baseline and a.status == SCORED),
                    None)
        if base is None:
            return ()
        return tuple(compare(a.arm, a.correct, base.arm, base.correct, self.margin)
                     for a in self.arms if a.arm != self.baseline and a.status == SCORED)

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "dataset": {"path": self.dataset, "sha256": self.sha256,
                                               "documents": self.documents},
                "baseline": self.baseline, "margin": self.margin, "model": self.model,
                "synthetic": self.synthetic, "settings": dict(self.settings),
                "arms": [a.to_dict() for a in self.arms],
                "comparisons": [c.to_dict() for c in self.comparisons()]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AccuracyRecord:
        dataset = data.get("dataset") or {}
        return cls(str(data["task"]), str(dataset.get("path") or ""),
                   str(dataset.get("sha256") or ""), int(dataset.get("documents") or 0),
                   str(data["baseline"]), float(data["margin"]), str(data.get("model") or ""),
                   data.get("synthetic"), dict(data.get("settings") or {}),
                   tuple(ArmScore.from_dict(a) for a in data["arms"]))


def read(path: Path, root: Path) -> AccuracyRecord | None:
    """The record at `path`, inside `root` (None when there is none); RecordError when it is
    not one dspark wrote."""
    data = load_json(path, root)
    if data is None:
        return None
    check(data, path, FIELDS, REQUIRED)
    if not 0 < data["margin"] < 1:
        raise RecordError(path, "margin", f"must be in (0, 1), not {data['margin']}")
    try:
        return AccuracyRecord.from_dict(data)
    except (KeyError, TypeError, ValueError) as e:
        raise RecordError(path, "the record", f"is inconsistent ({e})") from None
