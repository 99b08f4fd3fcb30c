"""A `dspark serve` in the foreground, as a user runs it: started, read until it says
"ready at URL", then interrupted. Shared by the tests of the cluster targets' serve."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.conftest import default_signals, wait_until

READY = "ready at "


class ForegroundServe:
    """The process, every stderr line read so far, and the URL it said it is ready at."""

    def __init__(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env),
                                     stderr=subprocess.PIPE, text=True,
                                     preexec_fn=default_signals)
        self.lines: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if READY in line:
                self._ready.set()

    def wait_ready(self, timeout_s: float) -> str:
        """The base URL of "ready at URL"; fails with the last lines when it ends first."""
        wait_until(lambda: self._ready.is_set() or self.proc.poll() is not None, timeout_s,
                   "`dspark serve` to say it is ready")
        assert self._ready.is_set(), self.tail()
        return next(ln for ln in self.lines if READY in ln).split(READY)[1].split()[0]

    def tail(self, n: int = 40) -> str:
        return "".join(self.lines[-n:])
