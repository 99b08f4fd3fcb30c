"""What passed, recomputed from the validation's lowest-level records each time (pure: records
in, sections out): the Summary's stage status comes from the same records as the sections below
it (the smoke's checks, the cells, the accuracy's per-document results, the focused tests'
counts), never from validate.json's own word; a failed, skipped or inconclusive stage is said so
wherever it is mentioned. The Summary's stage table is drawn by `markdown.py`; the Focused
Validation and Serving Smoke sections are rendered here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dspark_cli.accuracy.records import SCORED, AccuracyRecord
from dspark_cli.report.markup import NOT_RUN, block, code, one_line, table, text
from dspark_cli.report.revision import LintRow, lint_section
from dspark_cli.report.sources import SmokeRecords, Sources, lookup
from dspark_cli.run_files import SMOKE_JSON


@dataclass(frozen=True)
class StageRow:
    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class Focused:
    status: str  # passed / failed / not run
    tests: tuple[str, ...]
    source: str | None
    counts: Mapping[str, int]
    detail: str


@dataclass(frozen=True)
class CheckRow:
    name: str
    status: str
    evidence: str


@dataclass(frozen=True)
class Counters:
    drafts: int
    draft_tokens: int
    accepted: int
    k: int | None
    relation: str  # "126 = 18 x K=7", or why there is none


@dataclass(frozen=True)
class Smoke:
    verdict: str
    passed: bool
    mode: str
    checks: tuple[CheckRow, ...]
    generated_tokens: int | None
    counters: Counters | None
    limits: str
    record: str


SMOKE_LIMITS = ("It demonstrates that the server started, generated tokens and (where "
                "speculative decoding is on) executed its speculative path. It is not a "
                "throughput, latency, quality, or adaptive-vs-fixed performance measurement.")
SMOKE_FAILED = ("The smoke FAILED: it does not demonstrate that a server started, generated "
                "tokens or executed its speculative path; the failed checks above say what "
                "went wrong.")
_OK = ("passed", "skipped")


def _check_status(c: Mapping[str, Any]) -> str:
    """A smoke check's status, recomputed where its data holds the counts it was judged by
    (the DSpark draft's parameters against their pin); else as recorded."""
    status = str(c.get("status"))
    data = c.get("data") if isinstance(c.get("data"), Mapping) else {}
    if c.get("name") == "draft_params" and status != "skipped":
        seen, pin = data.get("params"), data.get("expected")
        if isinstance(pin, int) and not isinstance(pin, bool):
            return "passed" if seen == pin and not isinstance(seen, bool) else "failed"
    return status


def smoke_passed(smoke: Mapping[str, Any]) -> bool:
    """The smoke passed: its record says so and every check it holds passed or was skipped
    (a record with no checks showed nothing)."""
    checks = [c for c in smoke.get("checks") or () if isinstance(c, Mapping)]
    return (lookup(smoke, "verdict", "passed") is True and bool(checks)
            and all(_check_status(c) in _OK for c in checks))


def _smoke_stage(rec: SmokeRecords) -> tuple[str, str]:
    checks = [c for c in rec.smoke.get("checks") or () if isinstance(c, Mapping)]
    failed = [str(c.get("name")) for c in checks if _check_status(c) not in _OK]
    if smoke_passed(rec.smoke):
        return "passed", f"{len(checks)} checks, none failed"
    return "failed", (f"{len(failed)} of {len(checks)} checks failed or did not run: "
                      f"{', '.join(failed)}" if failed else "the smoke's record says it failed"
                      if checks else "no check recorded")


def _bench_stage(src: Sources) -> tuple[str, str]:
    cells = [c for c in lookup(src.bench.summary if src.bench else None, "cells") or ()
             if isinstance(c, Mapping)]
    invalid = [c for c in cells if c.get("valid") is not True]
    return ("failed" if invalid or not cells else "passed",
            f"{len(cells) - len(invalid)} of {len(cells)} cells valid")


def _accuracy_stage(record: AccuracyRecord) -> tuple[str, str]:
    from dspark_cli.accuracy.verdict import AccuracyVerdict, words

    failed = [a.arm for a in record.arms if a.status != SCORED]
    compared = record.comparisons()
    detail = "; ".join([*(f"{a} failed" for a in failed),
                        *(f"{c.arm} vs {c.baseline}: {words(c)}" for c in compared)])
    if failed or any(c.verdict is AccuracyVerdict.DIFFERENT for c in compared):
        return "failed", detail
    if not compared or any(c.verdict is AccuracyVerdict.INCONCLUSIVE for c in compared):
        return "inconclusive", detail or "no arm compared with the baseline"
    return "passed", detail


def _tests_stage(tests: Mapping[str, Any]) -> tuple[str, str] | None:
    counts = tests.get("counts") if isinstance(tests.get("counts"), Mapping) else {}
    if not counts:
        return None
    bad = sum(int(counts.get(k) or 0) for k in ("failed", "error", "errors"))
    ran = sum(int(v or 0) for v in counts.values())
    shown = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    if bad:
        return "failed", shown
    return ("passed", shown) if int(counts.get("passed") or 0) else (
        "failed" if not ran else str(tests.get("status")), shown or "no tests collected")


def _recomputed(src: Sources) -> dict[str, tuple[str, str]]:
    """Each stage's status and detail from its own records, where the report has them."""
    out = {}
    if src.smoke is not None:
        out["smoke"] = _smoke_stage(src.smoke)
    if src.bench is not None:
        out["bench"] = _bench_stage(src)
    if src.accuracy is not None:
        out["accuracy"] = _accuracy_stage(src.accuracy)
    if src.tests is not None and (t := _tests_stage(src.tests)) is not None:
        out["tests"] = t
    return out


def stages(src: Sources) -> tuple[StageRow, ...]:
    """One row per stage: `dspark validate`'s stages in its order (else one per smoke or bench
    run), each status recomputed from its records where the report has them; a recorded status
    that disagrees is named beside the recomputed one."""
    again = _recomputed(src)
    recorded = [(str(s["name"]), str(s["status"]), str(s.get("detail") or ""))
                for s in (src.validate or {}).get("stages", []) if isinstance(s, Mapping)]
    rows = []
    for name, status, detail in recorded:
        if name not in again:
            rows.append(StageRow(name, status, detail))
            continue
        mine, why = again.pop(name)
        note = "" if mine == status else f" (validate.json said {status}; recomputed)"
        rows.append(StageRow(name, mine, why + note))
    rows += [StageRow(name, status, detail) for name, (status, detail) in again.items()]
    return tuple(rows)


def focused(tests: Mapping[str, Any] | None) -> Focused:
    if tests is None:
        return Focused(NOT_RUN, (), None, {}, "no focused tests were configured "
                       "(validate.tests)")
    return Focused(str(tests["status"]), tuple(tests.get("node_ids") or ()),
                   tests.get("source"), dict(sorted((tests.get("counts") or {}).items())),
                   str(tests.get("detail") or ""))


def _counters(smoke: Mapping[str, Any]) -> Counters | None:
    spec = lookup(smoke, "counters", "spec_decode")
    if not spec:
        return None
    check = next((c for c in smoke.get("checks", []) if c.get("name") == "spec_decode"), {})
    k = lookup(check, "data", "k")
    drafts, tokens = int(spec["drafts"]), int(spec["draft_tokens"])
    if k is None:
        relation = "no K to relate them to (the spec_decode check did not run)"
    elif lookup(check, "data", "rule") == "at_most":
        relation = f"{tokens} <= {drafts} x K={k} (a drafter that may propose fewer than K)"
    else:
        sign = "=" if tokens == drafts * int(k) else "!="
        relation = f"{tokens} {sign} {drafts} x K={k}"
    return Counters(drafts, tokens, int(spec["accepted"]), None if k is None else int(k),
                    relation)


def smoke(rec: SmokeRecords | None) -> Smoke | None:
    if rec is None:
        return None
    s = rec.smoke
    checks = tuple(CheckRow(str(c["name"]), _check_status(c), str(c.get("evidence") or ""))
                   for c in s.get("checks", []))
    passed = smoke_passed(s)
    return Smoke(_smoke_stage(rec)[1] if not passed else str(lookup(s, "verdict", "summary")),
                 passed, str(s.get("mode")), checks, lookup(s, "request", "completion_tokens"),
                 _counters(s), SMOKE_LIMITS if passed else SMOKE_FAILED,
                 str(rec.directory / SMOKE_JSON))


def focused_section(f: Focused, lint: tuple[LintRow, ...]) -> list[str]:
    lines = ["## Focused Validation", ""]
    if f.status == NOT_RUN:
        return [*lines, f"Not run: {text(f.detail)}."]
    lines += [f"Run in {code(f.source)}:", "", *block([one_line(t) for t in f.tests]), ""]
    counts = ", ".join(f"{n} {text(k)}" for k, n in f.counts.items()) or "no tests collected"
    lines.append(f"Result: **{text(f.status)}** ({counts}).")
    if f.detail:
        lines += ["", text(f.detail)]
    return [*lines, "", *lint_section(lint)]


def smoke_section(s: Smoke | None) -> list[str]:
    lines = ["## Serving Smoke Validation", ""]
    if s is None:
        return [*lines, "Not run: no smoke record in the given run directories."]
    word = "passed" if s.passed else "FAILED"
    lines += [f"A live serving smoke test ({text(s.mode)}) {word}: {text(s.verdict)}.", ""]
    lines += table(("check", "result", "evidence"),
                   [(text(c.name), text(c.status), text(c.evidence)) for c in s.checks])
    lines += [""]
    if s.counters is None:
        lines.append("No speculative-decoding counters were recorded (speculative decoding "
                     "off, or /metrics unreadable).")
    else:
        c = s.counters
        width = len(str(max(c.drafts, c.draft_tokens, c.accepted)))
        lines += ["Observed speculative-decoding counters during the smoke request:", "",
                  *block([f"num_drafts_total:       {c.drafts:>{width}}",
                          f"num_draft_tokens_total: {c.draft_tokens:>{width}}  # "
                          f"{one_line(c.relation)}",
                          f"num_accepted_tokens:    {c.accepted:>{width}}"])]
    return [*lines, "", s.limits, "", f"Record: {code(s.record)}"]
