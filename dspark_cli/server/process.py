"""The server process: a launched process in its own process group, its output in the run
directory, and a teardown that leaves nothing behind; and the ports it listens on. Health, logs
and metrics live in `session.py`.

The output is read by one thread that appends every line to the log file and hands it to
listeners (an echo to the terminal, a fault watcher), so a fatal line is seen as it is printed.

A port is claimed on this host for as long as one job runs (`claimed_port`), so the parallel
jobs of one sweep that land on the same host (submitit_local, Slurm jobs sharing a node) never
pick the same port: each takes an exclusive lock file for its port, and the kernel drops the
lock when the job ends, however it ends.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_cli.errors import ServerError
from dspark_cli.launch.secrets import SCRUB
from dspark_cli.server import watchdog
from dspark_cli.server.watchdog import descendants, stop_group

LineListener = Callable[[str], None]
_SIGNAL_ORDER = ("exited", "SIGTERM", "SIGKILL")


@dataclass(frozen=True)
class Teardown:
    seconds: float
    # what ended it: "exited" (already gone), "SIGTERM" or "SIGKILL"; a cluster engine's own
    # verb for a deployment it ran ("scancel")
    signal: str
    leftover_pids: tuple[int, ...]
    port_free: bool
    # A deployment a cluster engine ran (`deploy/cluster_run.py`): what it was ("Slurm job
    # 12") and whether the engine confirmed it gone; None for process groups on this host.
    deployment: str | None = None
    deployment_gone: bool = True

    @property
    def clean(self) -> bool:
        return not self.leftover_pids and self.port_free and self.deployment_gone

    @classmethod
    def combined(cls, parts: Sequence[Teardown]) -> Teardown:
        """Several process groups torn down side by side (the nodes of one launch): the
        longest time, the strongest signal any needed, every leftover, every port."""
        return cls(max((p.seconds for p in parts), default=0.0),
                   max((p.signal for p in parts), key=_SIGNAL_ORDER.index, default="exited"),
                   tuple(sorted({pid for p in parts for pid in p.leftover_pids})),
                   all(p.port_free for p in parts))

    def to_dict(self) -> dict[str, object]:
        cluster = ({} if self.deployment is None else
                   {"deployment": self.deployment, "deployment_gone": self.deployment_gone})
        return {"seconds": round(self.seconds, 3), "signal": self.signal,
                "leftover_pids": list(self.leftover_pids), "port_free": self.port_free,
                **cluster}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Teardown:
        """The record `to_dict()` wrote (KeyError/TypeError/ValueError when it is not one)."""
        deployment = data.get("deployment")
        return cls(float(data["seconds"]), str(data["signal"]),
                   tuple(int(p) for p in data["leftover_pids"]), bool(data["port_free"]),
                   None if deployment is None else str(deployment),
                   bool(data.get("deployment_gone", True)))


def port_in_use(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def ensure_port_free(host: str, port: int) -> None:
    """Refuse to start a server on a port something already listens on (one wording for
    serve, smoke and bench)."""
    if port_in_use(host, port):
        raise ServerError(f"port {port} on {host} is already in use; nothing was started.",
                          hint=f"choose another with server.port=<port>, or attach to the "
                          f"running server with server.url=http://{host}:{port}")


# free_port draws from below the kernel's ephemeral range (ip_local_port_range), from here up.
FIRST_FREE_PORT = 10000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now, for a server the caller starts (tests, benchmarks):
    drawn at random from below the kernel's ephemeral range, which the kernel never hands out
    itself. A port from that range, free now, can be taken before the server binds it (a vLLM
    boot takes a minute) by any outgoing connection's local end or any bind to port 0, and
    servers booting side by side make thousands of both (health polls, vLLM's own ports)."""
    end = _ephemeral_start()
    if end - FIRST_FREE_PORT < 1000:  # no room below it: the kernel's choice
        with socket.socket() as s:
            s.bind((host, 0))
            return int(s.getsockname()[1])
    for port in random.sample(range(FIRST_FREE_PORT, end), 64):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port on {host} in {FIRST_FREE_PORT}-{end - 1}")


# What ends dspark like Ctrl-C: a scheduler's time limit or `kill` (SIGTERM), a closed terminal
# or dropped ssh session (SIGHUP).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_signals_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP to dspark into KeyboardInterrupt, so a managed server is torn
    down as on Ctrl-C instead of outliving dspark in its own group."""

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class ServerProcess:
    """One process group: `start()`, then `stop()` tears down the whole group (the session in
    `session.py` decides when)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path,
                 host: str, port: int | None, prefix: str = "", grace: float = 15.0) -> None:
        """`host`/`port`: where it listens, checked to be free again after teardown (None: it
        listens nowhere, a headless node); `prefix` starts each of its lines in the log, so
        several processes can share one log file; `grace`: how long its watchdog waits after
        SIGTERM before SIGKILL when dspark itself died (see `watchdog.py`)."""
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.host, self.port = host, port
        self.prefix = prefix
        self.grace = grace
        self.started_at = 0.0
        self.teardown: Teardown | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._listeners: list[LineListener] = []
        self._tail: collections.deque[str] = collections.deque(maxlen=400)
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------
    def add_listener(self, listener: LineListener) -> None:
        """Call `listener(line)` for every output line from now on (on the reader thread)."""
        with self._lock:
            self._listeners.append(listener)

    def start(self) -> ServerProcess:
        """Start it under its watchdog (`watchdog.py`), the leader of a new process group that
        tears the group down should dspark die."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if shutil.which(self.argv[0], path=self.env.get("PATH", os.defpath)) is None:
            raise ServerError(f"could not start {self.argv[0]!r}: no such executable file")
        try:
            self._proc = watchdog.popen(
                self.argv, self.grace, env=self.env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, errors="replace",
                bufsize=1)
        except OSError as e:
            raise ServerError(f"could not start {sys.executable!r}: {e.strerror or e}") from None
        self.started_at = time.monotonic()
        self._reader = threading.Thread(target=self._pump, name="server-output", daemon=True)
        self._reader.start()
        return self

    def _pump(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        with self.log_path.open("a", encoding="utf-8") as log:
            for line in self._proc.stdout:
                line = SCRUB(self.prefix + line)  # vLLM prints its args: a URL password too
                log.write(line)  # one write per line: lines of processes sharing it stay whole
                log.flush()
                line = line.rstrip("\n")
                with self._lock:
                    self._tail.append(line)
                    listeners = list(self._listeners)
                for listener in listeners:
                    with contextlib.suppress(OSError):  # an echo to a closed terminal
                        listener(line)

    # -- state -------------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        assert self._proc is not None, "server not started"
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def tail(self, n: int = 40) -> list[str]:
        with self._lock:
            return list(self._tail)[-n:]

    def wait(self, timeout: float | None = None) -> int | None:
        assert self._proc is not None
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    # -- teardown ----------------------------------------------------------------------------
    def stop(self, grace: float = 15.0) -> Teardown:
        """SIGTERM to the process group, SIGKILL after `grace` seconds, then confirm that no
        process of the group (or child that left it) is left and the port is free."""
        if self.teardown is not None:
            return self.teardown
        if self._proc is None:
            self.teardown = Teardown(0.0, "exited", (), True)
            return self.teardown
        start = time.monotonic()
        stopped = stop_group(self.pid, grace, descendants(self.pid))
        self._proc.wait(timeout=5)
        if self._reader is not None:
            self._reader.join(timeout=2)
        port_free = self.port is None or not port_in_use(self.host, self.port)
        self.teardown = Teardown(time.monotonic() - start, stopped.signal,
                                 stopped.leftover_pids, port_free)
        return self.teardown


SPAN = 200  # how many ports from the configured one a job may move up


def lock_dir() -> Path:
    """Per host and user (a node-local /tmp on a cluster is exactly one host's)."""
    return Path(tempfile.gettempdir()) / f"dsk-port-locks-{os.getuid()}"


@contextlib.contextmanager
def claimed_port(host: str, first: int, span: int = SPAN, width: int = 1) -> Iterator[int]:
    """The first port from `first` that no other job holds and nothing listens on, held until
    the block ends; ServerError when all `span` ports are taken. `width` > 1 claims a block of
    ports `port .. port + width - 1` (every node of a hybrid layout serves on `port + rank`):
    blocks start `width` apart, so the jobs of one sweep never overlap."""
    directory = lock_dir()
    directory.mkdir(mode=0o700, exist_ok=True)
    for port in range(first, min(first + span, 65537 - width), width):
        fd = os.open(directory / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if any(port_in_use(host, p) for p in range(port, port + width)):
            os.close(fd)
            continue
        try:
            yield port
        finally:
            os.close(fd)
        return
    raise ServerError(f"every port from {first} to {first + span - 1} on {host} is held by "
                      "another job or in use", hint="choose another range with server.port=N")
