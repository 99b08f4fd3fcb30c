"""The Source Revision section and the focused stage's lint/format results as Markdown (pure:
the same sections give the same bytes; record strings through `markup`)."""

from __future__ import annotations

from dspark_cli.report.markup import code, table, text
from dspark_cli.report.revision import LintRow, SourceRevision
from dspark_cli.report.words import NOT_RUN


def _diff(n: int | None) -> str:
    return "binary" if n is None else str(n)


def source_revision(r: SourceRevision | None) -> list[str]:
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


def lint_results(rows: tuple[LintRow, ...]) -> list[str]:
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
