"""The source tree the focused tests run in, as git sees it (the report's Source Revision), and
the lint/format commands of the focused stage run in it. Read only: git is asked with optional
locks off and no fsmonitor (a planted hook program never runs), and nothing in the tree is
written; the lint commands are the user's own (`validate.tests.lint`)."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from dspark_cli.launch.secrets import redact_text

# The token in a lint command that stands for the changed Python files (base..head).
CHANGED = "{changed}"
_GIT = ("git", "--no-pager", "-c", "core.fsmonitor=false", "-c", "core.quotepath=off")
_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
GIT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ChangedFile:
    path: str
    insertions: int | None  # None: a binary file
    deletions: int | None
    kind: str  # "runtime", "test" or "other"


@dataclass(frozen=True)
class Revision:
    """branch, head and the merge-base with `upstream`, and the diff between them."""

    path: str
    git: bool  # a git work tree
    error: str | None = None  # why a fact is missing (not a tree, no such upstream, ...)
    branch: str | None = None  # None: a detached HEAD
    head: str | None = None
    upstream: str | None = None
    base: str | None = None
    files: tuple[ChangedFile, ...] = ()
    insertions: int = 0
    deletions: int = 0
    uncommitted: int = 0  # changed or untracked paths in the work tree (not in the diff)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _GitError(Exception):
    pass


def _git(tree: Path, *args: str) -> str:
    try:
        done = subprocess.run([*_GIT, *args], cwd=tree, capture_output=True, check=False,
                              timeout=GIT_TIMEOUT_S, env={**os.environ, **_GIT_ENV})
    except FileNotFoundError:
        raise _GitError("git is not installed") from None
    except subprocess.TimeoutExpired:
        raise _GitError(f"git {args[0]} took over {GIT_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise _GitError(f"git {args[0]}: {said[-1] if said else f'exit {done.returncode}'}")
    return done.stdout.decode("utf-8", "replace")


def kind_of(path: str) -> str:
    """A test file (under tests/ or named test_*), a runtime (Python) file, or another file."""
    p = PurePosixPath(path)
    if "tests" in p.parts[:-1] or "test" in p.parts[:-1] or p.name.startswith("test_"):
        return "test"
    return "runtime" if p.suffix == ".py" else "other"


def _numstat(text: str) -> tuple[ChangedFile, ...]:
    """`git diff --numstat -z --no-renames`: 'ins<TAB>del<TAB>path<NUL>' per file."""
    files = []
    for entry in text.split("\0"):
        if entry.count("\t") < 2:
            continue
        ins, dels, path = entry.split("\t", 2)
        files.append(ChangedFile(path, int(ins) if ins.isdigit() else None,
                                 int(dels) if dels.isdigit() else None, kind_of(path)))
    return tuple(files)


def revision(tree: Path, upstream: str | None) -> Revision:
    """What git says of `tree`: never raises, a fact git cannot give is None with the reason."""
    where = str(tree)
    try:
        if _git(tree, "rev-parse", "--is-inside-work-tree").strip() != "true":
            raise _GitError("not inside a git work tree")
    except _GitError as e:
        return Revision(where, False, f"not a git work tree ({e})")
    try:
        head = _git(tree, "rev-parse", "--verify", "HEAD").strip()
        branch = _git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip()
        dirty = len([line for line in _git(tree, "status", "--porcelain", "-z",
                                           "--untracked-files=normal").split("\0") if line])
    except _GitError as e:
        return Revision(where, True, str(e))
    found = Revision(where, True, None, None if branch == "HEAD" else branch, head, upstream,
                     uncommitted=dirty)
    if not upstream:
        return replace(found, error="no upstream ref configured (validate.tests.upstream): "
                        "no base, no diff")
    try:
        base = _git(tree, "merge-base", "HEAD", upstream).strip()
        files = _numstat(_git(tree, "diff", "--numstat", "-z", "--no-renames", base, "HEAD"))
    except _GitError as e:
        return replace(found, error=f"no merge-base with {upstream} ({e})")
    return replace(found, base=base, files=files,
                    insertions=sum(f.insertions or 0 for f in files),
                    deletions=sum(f.deletions or 0 for f in files))


@dataclass(frozen=True)
class LintResult:
    command: str  # as run, shell-quoted (redacted)
    exit_code: int | None  # None: it did not finish (timed out, or could not start)
    summary: str  # its last line of output, or why it did not run
    status: str  # "passed", "failed" or "skipped"
    files: int = 0  # changed files it was given ({changed})
    log: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LintPlan:
    commands: Sequence[str]
    timeout_s: float
    changed: Sequence[str] = field(default_factory=tuple)  # changed Python files in the tree


def lint_argv(command: str, changed: Sequence[str]) -> list[str]:
    """The command's words, `{changed}` replaced by the changed files (one word each)."""
    out: list[str] = []
    for word in shlex.split(command):
        out.extend(changed if word == CHANGED else [word])
    return out


def changed_python(tree: Path, rev: Revision) -> list[str]:
    """The diff's Python files that still exist in the tree (a deleted file is not linted)."""
    return [f.path for f in rev.files if f.path.endswith(".py") and (tree / f.path).is_file()]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else "(no output)"
    return last if len(last) <= 200 else last[:197] + "..."


def lint(tree: Path, plan: LintPlan, logs: Path) -> tuple[LintResult, ...]:
    """Each lint/format command run in the tree, its exit code and last line kept."""
    results = []
    for i, command in enumerate(plan.commands, 1):
        if CHANGED in shlex.split(command) and not plan.changed:
            results.append(LintResult(redact_text(command), None, "no changed Python files to "
                                      "check (base..head)", "skipped"))
            continue
        argv = lint_argv(command, plan.changed)
        shown = redact_text(shlex.join(argv))
        log = logs / f"lint-{i}.log"
        try:
            done = subprocess.run(argv, cwd=tree, capture_output=True, check=False,
                                  timeout=plan.timeout_s)
        except (OSError, subprocess.TimeoutExpired) as e:
            why = (f"timed out after {plan.timeout_s:g} s"
                   if isinstance(e, subprocess.TimeoutExpired) else f"could not start: {e}")
            results.append(LintResult(shown, None, redact_text(why), "failed",
                                      len(plan.changed) if CHANGED in command else 0))
            continue
        output = done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace")
        log.write_text(redact_text(output))
        results.append(LintResult(shown, done.returncode, redact_text(_last_line(output)),
                                  "passed" if done.returncode == 0 else "failed",
                                  len(plan.changed) if CHANGED in command else 0, str(log)))
    return tuple(results)
