"""The report's accuracy section, from validate's accuracy record (accuracy/accuracy.json): each
arm's lm_eval score and its difference to the baseline with the equivalence verdict, recomputed
from the per-document results (an edited verdict never wins). Rendered here too
(`accuracy_section`), record strings through `markup`."""

from __future__ import annotations

from dataclasses import dataclass

from dspark_cli.accuracy.records import SCORED, AccuracyComparison, AccuracyRecord, words
from dspark_cli.report.markup import table, text

HEADER = ("arm", "accuracy (lm_eval)", "correct", "difference to baseline, 95%",
          "90% interval", "verdict", "note")


@dataclass(frozen=True)
class AccuracyRow:
    arm: str
    score: float | None
    correct: int
    documents: int
    difference: float | None  # points (the arm's accuracy minus the baseline's, x100)
    low: float | None
    high: float | None
    equivalence_low: float | None
    equivalence_high: float | None
    verdict: str  # "baseline" for the baseline arm; "failed" when it was not scored
    note: str


@dataclass(frozen=True)
class Accuracy:
    task: str
    dataset: str
    sha256: str
    documents: int
    settings: str
    baseline: str
    margin: float  # points
    rows: tuple[AccuracyRow, ...]
    caveat: str  # a synthetic model's scores say nothing of accuracy
    record: str


def _points(value: float | None) -> float | None:
    return None if value is None else round(100 * value, 2)


def _row(arm: str, record: AccuracyRecord, c: AccuracyComparison | None) -> AccuracyRow:
    score = next(a for a in record.arms if a.arm == arm)
    correct = sum(score.correct.values())
    if score.status != SCORED:
        return AccuracyRow(arm, None, 0, 0, None, None, None, None, None, "failed",
                           score.reason)
    if c is None:
        verdict = "baseline" if arm == record.baseline else "not compared"
        note = "" if arm == record.baseline else "the baseline was not scored"
        return AccuracyRow(arm, score.score, correct, len(score.correct), None, None, None,
                           None, None, verdict, note)
    return AccuracyRow(
        arm, score.score, correct, len(score.correct), _points(c.difference.estimate),
        _points(c.difference.low), _points(c.difference.high), _points(c.equivalence.low),
        _points(c.equivalence.high), words(c),
        f"{c.paired.arm_only + c.paired.base_only} of {c.paired.n} documents answered "
        "differently")


def section(record: AccuracyRecord | None, path: str | None) -> Accuracy | None:
    if record is None:
        return None
    compared = {c.arm: c for c in record.comparisons()}
    s = record.settings
    settings = (f"{s.get('num_fewshot', 0)}-shot, up to {s.get('max_gen_toks')} tokens, "
                f"temperature {s.get('temperature')}, {s.get('num_concurrent')} in flight"
                + (f", the first {s['limit']} documents" if s.get("limit") else ""))
    caveat = "" if record.synthetic is None else (
        f"The model is synthetic ({record.synthetic}: random weights made here), so every arm "
        "scores 0 by construction: the table shows that the eval ran against every arm's "
        "server, not that speculation keeps accuracy.")
    return Accuracy(record.task, record.dataset, record.sha256, record.documents, settings,
                    record.baseline, round(100 * record.margin, 2),
                    tuple(_row(a.arm, record, compared.get(a.arm)) for a in record.arms),
                    caveat, path or "")


def _num(value: float | None, places: int = 2, sign: bool = False) -> str:
    return "-" if value is None else f"{value:+.{places}f}" if sign else f"{value:.{places}f}"


def _rows(a: Accuracy) -> list[tuple[str, ...]]:
    """The table's cells as plain text (the renderer escapes them)."""
    out: list[tuple[str, ...]] = []
    for r in a.rows:
        interval = ("-" if r.low is None else
                    f"{_num(r.difference, sign=True)} [{_num(r.low, sign=True)}, "
                    f"{_num(r.high, sign=True)}] points")
        eq = ("-" if r.equivalence_low is None else
              f"[{_num(r.equivalence_low, sign=True)}, {_num(r.equivalence_high, sign=True)}]")
        out.append((r.arm, _num(r.score, 4), f"{r.correct} of {r.documents}", interval, eq,
                    r.verdict, r.note or "-"))
    return out


def _lead(a: Accuracy) -> str:
    """The paragraph above the table."""
    return (f"lm-evaluation-harness task {a.task} (GSM8K's prompt, strict-match answer and "
            f"exact match) on {a.dataset} ({a.documents} documents, sha256 {a.sha256}), "
            f"{a.settings}, against every arm's own server. Each arm's difference to "
            f"{a.baseline} is paired by document; comparable only when its 90% interval lies "
            f"within +-{a.margin:g} points. Record: {a.record}.")


def accuracy_section(a: Accuracy | None) -> list[str]:
    """The section as Markdown lines; "not run" without a record."""
    if a is None:
        return ["## Accuracy", "", "Not run: no accuracy record (`dspark validate`'s accuracy "
                "stage)."]
    caveat = ["", f"**Caveat:** {text(a.caveat)}"] if a.caveat else []
    return ["## Accuracy", "", text(_lead(a)), *caveat, "",
            *table(HEADER, [[text(c) for c in r] for r in _rows(a)])]
