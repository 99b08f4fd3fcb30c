"""The load generator's processes, forked from one warm vLLM CLI per environment.

A bench runs `vllm bench serve` once per phase; started cold, each pays vLLM's import (about
20 s of a core here, the most of a short phase). `LoadgenForks` keeps one
`dspark_cli.vllm.cli_forks` process per load environment for the length of a run (under the
watchdog, like every child dspark starts: it goes when dspark goes) and runs each phase as a
fork of it: a fresh process per phase, what `vllm bench serve` runs, in about a second. One that
cannot start or import vLLM is not used again: its phases run cold, as before.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol

from dspark_cli.server import watchdog
from dspark_cli.server.groups import alive, descendants, stop_group

READY_TIMEOUT_S = 600.0  # importing vLLM beside a booting server on a loaded host
CLOSE_WAIT_S = 5.0


class _Warm:
    """One `cli_forks` process: its pipes, and whether it answered ready."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.proc = watchdog.popen([sys.executable, "-m", "dspark_cli.vllm.cli_forks"], 0.0,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                                   stderr=subprocess.DEVNULL, env={**os.environ, **env})
        self.ready: bool | None = None  # None: not answered yet

    @property
    def out(self) -> IO[bytes]:
        assert self.proc.stdout is not None
        return self.proc.stdout

    def read(self, timeout_s: float) -> dict[str, Any] | None:
        """The next message, or None when none came within `timeout_s` or the process ended
        (unbuffered, so a line read is never left waiting in a buffer `select` cannot see)."""
        ready, _, _ = select.select([self.out], [], [], max(timeout_s, 0.0))
        if not ready:
            return None
        line = self.out.readline()
        return json.loads(line) if line.strip() else None

    def answered(self, timeout_s: float) -> bool | None:
        """Whether it can run commands: True, False (no: run them cold), or None when it is
        still importing after `timeout_s` seconds."""
        if self.ready is None:
            if self.proc.poll() is not None:
                self.ready = False
            elif (message := self.read(timeout_s)) is not None or self.proc.poll() is not None:
                self.ready = bool(message and message.get("ready"))
        return self.ready if self.ready is None else self.ready and self.proc.poll() is None

    def send(self, request: Mapping[str, Any]) -> int | None:
        """The fork's pid, or None when this process no longer answers."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        message = self.read(READY_TIMEOUT_S)
        return None if message is None else int(message["pid"])

    def close(self) -> None:
        """End of input ends a process that answered; one still importing (no phase came, a
        cell that failed before its load) or one that does not end is stopped at once."""
        with suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(CLOSE_WAIT_S if self.ready else 0.0)
        except subprocess.TimeoutExpired:
            stop_group(self.proc.pid, grace=0.0, also=descendants(self.proc.pid))
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Process(Protocol):
    """What a phase's runner asks of its process."""

    def poll(self, timeout_s: float) -> int | None: ...

    def kill(self) -> None: ...


class Fork:
    """One command running as a fork of a warm process (a Popen's poll and kill)."""

    def __init__(self, warm: _Warm, pid: int) -> None:
        self.warm, self.pid = warm, pid
        self.returncode: int | None = None

    def poll(self, timeout_s: float = 0.0) -> int | None:
        if self.returncode is None:
            message = self.warm.read(timeout_s)
            if message is not None and "returncode" in message:
                self.returncode = int(message["returncode"])
            elif message is None and self.warm.proc.poll() is not None:
                self.returncode = -signal.SIGKILL  # the warm process itself was killed
        return self.returncode

    def kill(self) -> None:
        """At once, with whatever it started; then its end is read."""
        for pid in alive({self.pid} | descendants(self.pid)):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + CLOSE_WAIT_S
        while self.poll(0.1) is None and time.monotonic() < deadline:
            pass


class Waiting:
    """A phase's process to be: waits (a slice per poll) while the warm process imports, then
    runs the command as its fork, or cold where that process cannot (a Popen's poll and kill)."""

    def __init__(self, warm: _Warm, request: Mapping[str, Any], cold: Callable[[], Process]):
        self.warm, self.request, self.cold = warm, request, cold
        self.proc: Process | None = None

    def poll(self, timeout_s: float) -> int | None:
        if self.proc is None:
            ready = self.warm.answered(timeout_s)
            if ready is None:
                return None
            pid = self.warm.send(self.request) if ready else None
            if pid is None:
                self.warm.ready = False
            self.proc = self.cold() if pid is None else Fork(self.warm, pid)
            return None
        return self.proc.poll(timeout_s)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()


class LoadgenForks:
    """The warm processes of one run, by load environment; closed with the run."""

    def __init__(self) -> None:
        self._warm: dict[tuple[tuple[str, str], ...], _Warm] = {}

    def prepare(self, env: Mapping[str, str]) -> _Warm:
        """The warm process for `env`, started now (beside a server's boot) if it is not yet."""
        key = tuple(sorted(env.items()))
        if key not in self._warm:
            self._warm[key] = _Warm(env)
        return self._warm[key]

    def start(self, argv: Sequence[str], env: Mapping[str, str], log: Path,
              cold: Callable[[], Process]) -> Waiting:
        """`argv` (`vllm ...`) in this directory, output to `log`: a fork of the warm process
        for `env` once it has imported vLLM, else `cold()`."""
        return Waiting(self.prepare(env), {"argv": list(argv), "env": {**os.environ, **env},
                                           "cwd": os.getcwd(), "log": os.path.abspath(log)},
                       cold)

    def close(self) -> None:
        for warm in self._warm.values():
            warm.close()
        self._warm.clear()

    def __enter__(self) -> LoadgenForks:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
