"""The report's Source Revision (branch, head, base, changed files, diff size) and the focused
stage's lint/format results, from the records `validate` wrote beside its focused tests
(source.json, lint.json: `validate/source.py`). Pure: records in, sections out; a commit that
is no hex object name, or a kind or status dspark never writes, is refused (exit 2). Rendered
here too (`revision_section`, `lint_section`), record strings through `markup`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dspark_cli.report.markup import NOT_RUN, UNKNOWN, code, table, text
from dspark_cli.run_files import LINT_JSON, SOURCE_JSON
from dspark_cli.untrusted import RecordError

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
