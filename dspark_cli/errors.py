"""Expected failures and their exit codes: the one table the dispatcher maps errors through."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    """Documented exit codes (README: "Exit codes"); `MEANING` says each in a few words."""

    OK = 0
    CHECK_FAILED = 1
    USAGE = 2
    SERVER = 3
    MISSING_ENGINE = 4  # vLLM or torch is not installed (or cannot be imported) here
    INTERNAL = 70  # a bug or an unforeseen failure: reported in one line, --debug for more
    INTERRUPTED = 130
    BROKEN_PIPE = 128 + 13  # stdout closed early (`dspark ... | head -1`): the shell's SIGPIPE


MEANING = {ExitCode.OK: "ok", ExitCode.CHECK_FAILED: "a check failed",
           ExitCode.USAGE: "usage or config error", ExitCode.SERVER: "server failed",
           ExitCode.MISSING_ENGINE: "vLLM not installed", ExitCode.INTERNAL: "internal error",
           ExitCode.INTERRUPTED: "interrupted", ExitCode.BROKEN_PIPE: "stdout closed early"}


def exit_codes_help() -> str:
    """The help texts' one line on exit codes, from the table."""
    return "Exit codes: " + ", ".join(f"{int(c)} {MEANING[c]}" for c in ExitCode) + "."


def worst(codes: Iterable[int]) -> int:
    """The exit code of several results (stages, arms, multirun jobs): the highest, 0 for none."""
    return max(codes, default=int(ExitCode.OK))


class DsparkError(Exception):
    """An expected failure: printed as one paragraph, never as a traceback."""

    exit_code: ExitCode = ExitCode.CHECK_FAILED

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class CheckFailed(DsparkError):
    """A check ran and found something wrong (preflight, checkpoint, smoke verdict)."""

    exit_code = ExitCode.CHECK_FAILED


class UsageError(DsparkError):
    """The command line or the composed config is wrong; nothing was started."""

    exit_code = ExitCode.USAGE


class ServerError(DsparkError):
    """The server failed to start, died, or did not stay healthy. `reason` is the short cause
    (for records and verdicts); `message` adds where the log is and its last lines."""

    exit_code = ExitCode.SERVER

    def __init__(self, message: str, hint: str | None = None, *,
                 reason: str | None = None) -> None:
        super().__init__(message, hint)
        self.reason = reason or message

    @classmethod
    def failed(cls, reason: str, log_path: Path | None, tail: Sequence[str]) -> ServerError:
        where = f"; log: {log_path}" if log_path else ""
        lines = "".join(f"\n    {line}" for line in tail)
        return cls(f"{reason}{where}" + (f"\n  last lines:{lines}" if tail else ""),
                   reason=reason)


INSTALL_HINT = ("install it: `pip install 'dspark[cpu]'` on a machine without a GPU (`make setup` "
                "does it), or your platform's vLLM build on a GPU host")


class MissingEngine(DsparkError):
    """The command runs vLLM, and this Python cannot import vLLM or torch."""

    exit_code = ExitCode.MISSING_ENGINE

    def __init__(self, module: str, detail: str) -> None:
        super().__init__(f"this command runs vLLM, and {sys.executable} cannot import "
                         f"{module} ({detail}).", hint=INSTALL_HINT)


# The optional parts of dspark (pyproject's extras) by the module each is imported as: they are
# imported where used, so the base install stays small inside a platform's image.
EXTRAS = {"kubernetes": "k8s", "jsonschema": "k8s", "pydantic": "k8s", "matplotlib": "plot",
          "lm_eval": "eval"}


class MissingExtra(UsageError):
    """What this command asked for needs an extra that is not installed here."""

    def __init__(self, module: str, needed_for: str | None = None, *,
                 python: str | None = None, elsewhere: str | None = None) -> None:
        """`python`: the interpreter that lacks it, when it is not dspark's own; `elsewhere`:
        how to name another interpreter that has it, where one may."""
        top = module.split(".")[0]
        extra = EXTRAS[top]
        super().__init__(f"{needed_for or 'this command'} needs {top}, which "
                         f"{python or sys.executable} "
                         f"cannot import: install dspark's `{extra}` extra "
                         f"(pip install 'dspark[{extra}]')"
                         + (f", or {elsewhere}." if elsewhere else "."))
