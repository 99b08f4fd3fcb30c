"""Every error a command raises becomes a message (or silence) and an exit code here, and only
here (errors.py names the codes)."""

from __future__ import annotations

import os
import sys

from dspark_cli.errors import EXTRAS, DsparkError, ExitCode, MissingEngine, MissingExtra

# What `serve`, `smoke` and `bench` import to run vLLM: missing, it is an install to make.
ENGINE = frozenset({"vllm", "torch"})


def err(message: str) -> None:
    print(f"dspark: {message}", file=sys.stderr)


def exit_code_for(error: BaseException, debug: bool) -> int:
    """The one place an error becomes a message (or silence) and an exit code."""
    if isinstance(error, KeyboardInterrupt):
        err("cancelled.")
        return int(ExitCode.INTERRUPTED)
    if isinstance(error, BrokenPipeError):
        # Nothing more can reach stdout; point it at /dev/null so the final flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(ExitCode.BROKEN_PIPE)
    if debug:
        raise error
    if isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] in ENGINE:
        error = MissingEngine(error.name or "", str(error))
    elif isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] in EXTRAS:
        error = MissingExtra(error.name or "")
    if isinstance(error, DsparkError):
        err(error.message + (f"\n  hint: {error.hint}" if error.hint else ""))
        return int(error.exit_code)
    err(f"unexpected {type(error).__name__}: {error} (rerun with --debug for the traceback)")
    return int(ExitCode.INTERNAL)
