"""What passed, recomputed from the validation's lowest-level records each time (pure: records
in, sections out): the Summary's stage status comes from the same records as the sections below
it (the smoke's checks, the cells, the accuracy's per-document results, the focused tests'
counts), never from validate.json's own word; a failed, skipped or inconclusive stage is said so
wherever it is mentioned. The Summary's stage table is drawn by `markdown.py`; the Focused
Validation and Serving Smoke sections are rendered here.

The focused stage's Source Revision (branch, head, base, changed files, diff size) and
lint/format results, from the records `validate` wrote beside its focused tests (source.json,
lint.json: `validate/source.py`); a commit that is no hex object name, or a kind or status
dspark never writes, is refused (exit 2). Rendered here too (`revision_section`,
`lint_section`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dspark_cli.accuracy.records import SCORED, AccuracyRecord, AccuracyVerdict, words
from dspark_cli.paths import LINT_JSON, SMOKE_JSON, SOURCE_JSON
from dspark_cli.report.markup import NOT_RUN, UNKNOWN, block, code, one_line, table, text
from dspark_cli.report.sources import SmokeRecords, Sources, lookup
from dspark_cli.untrusted import RecordError


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
    data = c["data"] if isinstance(c.get("data"), Mapping) else {}
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
    check: Mapping[str, Any] = next(
        (c for c in smoke.get("checks", []) if c.get("name") == "spec_decode"), {})
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


_OBJECT = re.compile(r"[0-9a-f]{7,64}")
KINDS = ("runtime", "test", "other")
LINT_STATUSES = ("passed", "failed", "skipped")


@dataclass(frozen=True)
class ChangedRow:
    path: str
    kind: str
    insertions: int | None  # None: binary
    deletions: int | None


@dataclass(frozen=True)
class SourceRevision:
    status: str  # "recorded", "not a git tree" or "not run"
    path: str
    branch: str
    head: str
    base: str  # the merge-base, or why there is none
    upstream: str
    changed: str  # "3 runtime files and 2 test files"
    files: tuple[ChangedRow, ...]
    insertions: int | None
    deletions: int | None
    uncommitted: int
    note: str  # what git could not say, and why


@dataclass(frozen=True)
class LintRow:
    command: str
    status: str
    exit_code: int | None
    summary: str
    files: int


def _object(record: Mapping[str, Any], key: str) -> str | None:
    value = record.get(key)
    if value is not None and not _OBJECT.fullmatch(value):
        raise RecordError(SOURCE_JSON, key, "must be a git object name (hex), not "
                          f"{value[:40]!r}")
    return value


def _count(files: tuple[ChangedRow, ...]) -> str:
    if not files:
        return "none"
    n = {k: sum(1 for f in files if f.kind == k) for k in KINDS}
    words = {"runtime": "runtime file", "test": "test file", "other": "other file"}
    parts = [f"{c} {words[k]}{'s' if c != 1 else ''}" for k, c in n.items() if c]
    return " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)


def revision(record: Mapping[str, Any] | None, tests_ran: bool) -> SourceRevision:
    if record is None:
        why = ("no source revision was recorded (a run from before dspark recorded it)"
               if tests_ran else "no focused tests ran (validate.tests), so no source tree")
        return SourceRevision(NOT_RUN, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN, (),
                              None, None, 0, why)
    path, note = str(record.get("path") or UNKNOWN), str(record.get("error") or "")
    if not record["git"]:
        return SourceRevision("not a git tree", path, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN,
                              UNKNOWN, (), None, None, 0, note)
    files = []
    for f in record.get("files") or ():
        if f["kind"] not in KINDS:
            raise RecordError(SOURCE_JSON, "files.*.kind", f"must be one of {', '.join(KINDS)}")
        files.append(ChangedRow(str(f["path"]), str(f["kind"]), f.get("insertions"),
                                f.get("deletions")))
    head, base = _object(record, "head"), _object(record, "base")
    diffed = base is not None
    return SourceRevision(
        "recorded", path, str(record.get("branch") or "(detached HEAD)"), head or UNKNOWN,
        base or "none", str(record.get("upstream") or "none configured"),
        _count(tuple(files)) if diffed else UNKNOWN, tuple(files),
        int(record.get("insertions") or 0) if diffed else None,
        int(record.get("deletions") or 0) if diffed else None,
        int(record.get("uncommitted") or 0), note)


def lint(record: Mapping[str, Any] | None) -> tuple[LintRow, ...]:
    rows = []
    for r in (record or {}).get("results") or ():
        if r["status"] not in LINT_STATUSES:
            raise RecordError(LINT_JSON, "results.*.status",
                              f"must be one of {', '.join(LINT_STATUSES)}")
        rows.append(LintRow(str(r["command"]), str(r["status"]), r.get("exit_code"),
                            str(r.get("summary") or ""), int(r.get("files") or 0)))
    return tuple(rows)


def _diff(n: int | None) -> str:
    return "binary" if n is None else str(n)


def revision_section(r: SourceRevision | None) -> list[str]:
    lines = ["## Source Revision", ""]
    if r is None or r.status == NOT_RUN:
        return [*lines, f"Not recorded: {text(r.note if r else 'no focused-test record')}."]
    if r.status != "recorded":
        return [*lines, f"The focused tests' source tree {code(r.path)} is not a git work "
                f"tree ({text(r.note)}): no branch, head or base to state."]
    lines += [f"From git in the focused tests' source tree {code(r.path)}:", "",
              f"- Branch: {code(r.branch)}", f"- Head: {code(r.head)}",
              f"- Base (merge-base with {code(r.upstream)}): {code(r.base)}",
              f"- Changed files: {text(r.changed)}"]
    if r.insertions is not None:
        lines.append(f"- Total diff: {r.insertions} insertions, {r.deletions} deletions")
    lines.append("- Work tree: " + ("clean" if not r.uncommitted else
                                     f"{r.uncommitted} uncommitted or untracked paths (not in "
                                     "the diff above, nor in the head)"))
    if r.note:
        lines += ["", text(r.note) + "."]
    if r.files:
        lines += ["", *table(("file", "kind", "insertions", "deletions"),
                             [(code(f.path), text(f.kind), _diff(f.insertions),
                               _diff(f.deletions)) for f in r.files])]
    return lines


def lint_section(rows: tuple[LintRow, ...]) -> list[str]:
    """The lines under the focused tests' result."""
    if not rows:
        return ["No lint or format commands were configured (validate.tests.lint)."]
    failed = [r for r in rows if r.status == "failed"]
    word = "failed" if failed else "passed" if any(r.status == "passed" for r in rows) \
        else "were skipped"
    lines = [f"Changed-file lint and format checks {word}:", ""]
    return [*lines, *table(("command", "result", "exit code", "last line of output"), [
        (code(r.command), text(r.status), "-" if r.exit_code is None else r.exit_code,
         text(r.summary)) for r in rows])]
