"""The exit of a dspark helper process that imported vLLM, once its answer is written.

The interpreter's own finalization of vLLM's and torch's module graph costs about 3 s of a
core here after the work is done (`benchmarks/helper_exit.py`: 8.0 s against 10.9 s for a
verdict), and whoever started the helper (a preflight's verdict, the option table, a bench's
warm load generator) waits for it. The atexit handlers still run (logging's, vLLM's own
cleanups), through CPython's `atexit._run_exitfuncs` (what the interpreter itself calls at
exit, on every Python dspark supports); only that teardown is skipped.
"""

from __future__ import annotations

import atexit
import os
import sys
from contextlib import suppress
from typing import NoReturn


def quick_exit(code: int = 0) -> NoReturn:
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a reader gone, a stream closed
            stream.flush()
    os._exit(code)
