"""One server session, the same for `serve`, `smoke` and `bench`: start it (or attach to one),
wait until it is healthy while racing the log watcher and the process, read its metrics until
they settle, and tear it down into a frozen `Teardown`.

    with ServerSession(target) as session:      # managed: port check, scratch, process, watcher
        session.wait_healthy()                  # ServerError(reason=...) on death/fatal/timeout
        before = session.scrape()
        ...
        after = session.scrape_settled(before, tokens)
    session.teardown                            # None when attached: not ours to stop

Attached (`target.argv is None`) is the same interface over a running server: no start, no
teardown, and log checks only when the target names a log file.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dspark_cli.errors import ServerError
from dspark_cli.server import probe
from dspark_cli.server.logscan import LogSnapshot, LogWatcher, Pattern
from dspark_cli.server.metrics import GENERATION_TOKENS, Scrape, scrape
from dspark_cli.server.process import ServerProcess, Teardown, ensure_port_free

HEALTH_POLL_S = 0.1
SETTLE_S = 3.0  # vLLM may count a request's last tokens just after answering it
SETTLE_POLL_S = 0.1


@dataclass(frozen=True)
class Target:
    """Where a server is (or is to be started) and what its session watches."""

    base_url: str
    host: str
    port: int
    log_path: Path | None
    ready_timeout_s: float
    stop_grace_s: float = 15.0
    argv: tuple[str, ...] | None = None  # None: attached, not ours to start or stop
    env: Mapping[str, str] = field(default_factory=dict)
    fatal: tuple[Pattern, ...] = ()
    watch: tuple[Pattern, ...] = ()
    context_lines: int = 10
    metrics_timeout_s: float = 5.0

    @property
    def managed(self) -> bool:
        return self.argv is not None


class ServerSession:
    """A context manager over one server; see the module docstring."""

    def __init__(self, target: Target, *, echo: Callable[[str], None] | None = None,
                 abort: Callable[[], str | None] | None = None) -> None:
        """`echo` gets every output line of a managed server; `abort()` names a reason to stop
        waiting (a background check's rejection, a signal), or None."""
        self.target = target
        self._echo, self._abort = echo, abort
        self.process: ServerProcess | None = None
        self.watcher: LogWatcher | None = None
        self.teardown: Teardown | None = None
        self.final_log: LogSnapshot | None = None
        self.started_at = 0.0
        self._scratch: Path | None = None

    @property
    def managed(self) -> bool:
        return self.target.managed

    # -- life ---------------------------------------------------------------------------------
    def __enter__(self) -> ServerSession:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> ServerSession:
        """Managed: refuse a busy port, make a private TMPDIR, start the process and its log
        watcher. Attached: only watch the given log, if any."""
        t = self.target
        if t.managed:
            ensure_port_free(t.host, t.port)
            # vLLM leaves sockets and vllm_dist_* files in TMPDIR; short, because ZeroMQ's IPC
            # socket paths must fit in 107 bytes. Owned here: one per session, removed at close.
            self._scratch = Path(tempfile.mkdtemp(prefix="dspark-"))
            assert t.argv is not None and t.log_path is not None
            self.process = ServerProcess(t.argv, {**t.env, "TMPDIR": str(self._scratch)},
                                         t.log_path, t.host, t.port)
        if t.log_path is not None:
            self.watcher = LogWatcher(t.log_path, t.fatal, t.watch,
                                      context=t.context_lines).start()
        self.started_at = time.monotonic()
        if self.process is not None:
            if self._echo is not None:
                self.process.add_listener(self._echo)
            try:
                self.process.start()
            except ServerError:
                self.close()
                raise
        return self

    def close(self) -> Teardown | None:
        """Managed: SIGTERM, SIGKILL after the grace, confirm nothing is left; the log's final
        snapshot is kept in `final_log`. Safe to call twice."""
        if self.process is not None and self.teardown is None:
            self.teardown = self.process.stop(self.target.stop_grace_s)
        if self.watcher is not None and self.final_log is None:
            self.final_log = self.watcher.stop()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        return self.teardown

    # -- state --------------------------------------------------------------------------------
    def fatal_line(self) -> str | None:
        """The first fatal log line seen so far, as `pattern: line`."""
        if self.watcher is None or not self.watcher.fired.is_set():
            return None
        event = self.watcher.snapshot().fatal[0]
        return f"{event.pattern}: {event.line}"

    def exit_code(self, wait_s: float = 0.0) -> int | None:
        """The managed server's exit code if it ended; `wait_s` waits for an exit that a dropped
        connection announces a moment early."""
        if self.process is None:
            return None
        if wait_s and self.process.alive():
            self.process.wait(wait_s)
        return self.process.returncode

    def stop_reason(self) -> str | None:
        """Why waiting on this server is pointless now, or None."""
        fatal = self.fatal_line()
        if fatal:
            return f"a fatal log line ({fatal})"
        reason = self._abort() if self._abort is not None else None
        if reason:
            return reason
        code = self.exit_code()
        return None if code is None else f"the server exited with code {code}"

    def log_snapshot(self) -> LogSnapshot | None:
        """The log as of now, read up to the current end of the file."""
        return self.watcher.catch_up() if self.watcher is not None else None

    # -- waits ----------------------------------------------------------------------------------
    def wait_healthy(self) -> float:
        """Seconds from start until /health answered 200; ServerError (with `reason`) as soon
        as the process dies, a fatal line appears, `abort()` names a reason, or the timeout
        (`server.ready_timeout_s`) passes."""
        timeout = self.target.ready_timeout_s
        deadline = self.started_at + timeout
        while True:
            reason = self.stop_reason()
            if reason:
                raise self._failure(f"{reason} before /health answered 200")
            if probe.healthy(self.target.base_url):
                return time.monotonic() - self.started_at
            if time.monotonic() > deadline:
                raise self._failure(f"/health did not answer 200 within {timeout:.0f} s "
                                    "(server.ready_timeout_s)")
            time.sleep(HEALTH_POLL_S)

    def _failure(self, reason: str) -> ServerError:
        tail = tuple(self.process.tail(15)) if self.process is not None else ()
        return ServerError.failed(reason, self.target.log_path, tail)

    def scrape(self) -> Scrape:
        """/metrics now (ScrapeError on failure)."""
        return scrape(self.target.base_url, self.target.metrics_timeout_s)

    def scrape_settled(self, before: Scrape, tokens: int | float,
                       settle_s: float = SETTLE_S) -> Scrape:
        """/metrics once the server's generation counter has caught up with `tokens` generated
        since `before`, or after `settle_s`: a count that stays short is a real mismatch."""
        deadline = time.monotonic() + settle_s
        after = self.scrape()
        while (after.delta(before).total(GENERATION_TOKENS) < tokens
               and time.monotonic() < deadline and not self.stop_reason()):
            time.sleep(SETTLE_POLL_S)
            after = self.scrape()
        return after

    def healthy(self) -> bool:
        return probe.healthy(self.target.base_url)

    def version(self) -> str | None:
        return probe.version(self.target.base_url)

