"""The accuracy stage's record (accuracy/accuracy.json): every arm's lm_eval score and which
documents it answered correctly, the settings and the pinned dataset. The comparisons are
recomputed from the per-document results whenever the record is read (`comparisons()`), so an
edited verdict never wins; the file is read back as untrusted input (`untrusted.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dspark_cli.accuracy.verdict import AccuracyComparison, compare
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
