"""vLLM's CLI imported once, each command a fork: `python -m dspark_cli.vllm.cli_forks`.

A `vllm bench serve` process spends most of its start importing vLLM (about 20 s of one core on
a small host, more than a short phase's load); a bench runs one per phase. This process imports
vLLM's CLI once and runs each command it is sent in a fork of itself, so every phase still gets
a process of its own that has run nothing before (no state crosses phases), started in about a
second. It is what `vllm ...` runs, `main()` of vLLM's CLI with the command's argv (through the
shim's version lookup, as `dspark_cli.vllm.shim` runs it); dspark starts it under its watchdog
(`bench/loadgen_forks.py`).

The protocol is JSON lines. Out: first {"ready": true} or {"ready": false, "error": ...}. In:
{"argv": ["vllm", ...], "env": {...}, "cwd": ..., "log": ...}; out: {"pid": N} once the fork
runs, then {"pid": N, "returncode": R} when it ends (negative: killed by that signal, as
subprocess says). One command at a time; end of input ends the process.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from dspark_cli.vllm.quick_exit import quick_exit

# What `vllm bench serve` imports at its start (vLLM's internals: one that is gone in another
# vLLM version is left to the command to import, which is only slower).
WARM_MODULES = ("vllm.entrypoints.cli.main", "vllm.entrypoints.cli.benchmark.main",
                "vllm.benchmarks.serve")


def _say(message: Mapping[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _exit_code(code: object) -> int:
    """SystemExit's code as a process's exit status, as the interpreter maps it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(argv: Sequence[str], env: Mapping[str, str], cwd: str, log: str) -> int:
    """In the fork: the command's stdio, directory and environment, then vLLM's `main()`."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    os.chdir(cwd)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = list(argv)
    try:
        from vllm.entrypoints.cli.main import main

        return _exit_code(main())
    except SystemExit as e:
        return _exit_code(e.code)
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _run(request: Mapping[str, Any]) -> None:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _child(request["argv"], request["env"], request["cwd"], request["log"])
        finally:
            os._exit(code)
    _say({"pid": pid})
    _, status = os.waitpid(pid, 0)
    _say({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


def main() -> None:
    from dspark_cli.vllm.shim import patch_version_lookup

    patch_version_lookup()
    try:
        importlib.import_module(WARM_MODULES[0])
    except Exception as e:  # a broken install: the caller runs its commands the usual way
        _say({"ready": False, "error": f"{type(e).__name__}: {e}"})
        return
    for name in WARM_MODULES[1:]:
        try:
            importlib.import_module(name)
        except Exception:  # another vLLM's layout: the fork imports what it needs
            continue
    _say({"ready": True})
    for line in sys.stdin:
        if line.strip():
            _run(json.loads(line))


if __name__ == "__main__":
    main()
    quick_exit(0)
