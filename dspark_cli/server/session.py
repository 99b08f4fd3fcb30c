"""One server session, the same for `serve`, `smoke` and `bench`: start its deployment (or
attach to a running server), wait until it is healthy while racing the log watcher and the
deployment's end, read its metrics until they settle, and tear it down into a frozen `Teardown`.
Every request the session makes (health, /metrics, the stall watch's reads, a command's own
requests through `session.http`) goes through its one HTTP client, closed with it.

    with ServerSession(deployment, watch) as session:  # started, its log watched
        session.wait_healthy()              # ServerError(reason=...): ended, fatal, timeout
        before = session.scrape()
        ...
        after = session.scrape_settled(before, tokens)
    session.teardown                                    # None when attached: not ours to stop

What runs the server is a `Deployment` (`deployment.py`): process groups here, an attached
server, a Slurm job, Kubernetes objects; the session treats them alike. One an engine places
(`queued`) is asked at its head's URL once the engine knows it, and its ready timeout counts
from that moment (a queue's wait is not the server's).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx

from dspark_cli.console import progress
from dspark_cli.errors import ServerError
from dspark_cli.server import probe
from dspark_cli.server.deployment import Deployment, Watch
from dspark_cli.server.liveness import Stall, StallWatch
from dspark_cli.server.logscan import LogSnapshot, LogWatcher
from dspark_cli.server.metrics import GENERATION_TOKENS, Scrape, scrape
from dspark_cli.server.process import Teardown

HEALTH_POLL_S = 1.0  # /health while booting (vLLM's own sweep polls once a second too)
# Between two polls the session waits on the deployment (a process here: on its exit) in slices
# this long, checking the log watcher's fatal flag after each: a death or a fatal line ends the
# wait at once, not at the next poll.
WAKE_S = 0.1
# Attached: how long connections may be refused before nothing listening is the verdict (not
# `ready_timeout_s`, which is for a server that is booting).
SETTLE_POLL_S = 0.1
PROGRESS_EVERY_S = 15.0  # a placed deployment's state while waiting: on change, else this often
TAIL_LINES = 15


class ServerSession:
    """A context manager over one server; see the module docstring."""

    def __init__(self, deployment: Deployment, watch: Watch, *,
                 echo: Callable[[str], None] | None = None,
                 abort: Callable[[], str | None] | None = None) -> None:
        """`echo` gets every output line of what runs here; `abort()` names a reason to stop
        waiting (a background check's rejection, a signal), or None."""
        self.deployment, self.watch = deployment, watch
        self._echo, self._abort = echo, abort
        self.watcher: LogWatcher | None = None
        self.teardown: Teardown | None = None
        self.final_log: LogSnapshot | None = None
        self.started_at = 0.0
        self._started = False
        self.stall_watch: StallWatch | None = None
        self.http = httpx.Client()

    @property
    def managed(self) -> bool:
        return self.deployment.managed

    @property
    def log_path(self) -> Path | None:
        return self.deployment.log_path

    @property
    def base_url(self) -> str:
        """Where the server answers: a placed deployment's head once known, else the plan's."""
        return self.deployment.base_url() or self.deployment.planned_url

    # -- life ---------------------------------------------------------------------------------
    def __enter__(self) -> ServerSession:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> ServerSession:
        """Watch the log (if any) and start the deployment; closed again if that fails."""
        d = self.deployment
        if not d.managed:
            d.start()  # the URL is checked before any log is watched
        if d.log_path is not None:
            self.watcher = LogWatcher(d.log_path, self.watch.fatal, self.watch.watch,
                                      context=self.watch.context_lines).start()
        self.started_at = time.monotonic()
        stall = self.watch.stall
        if stall is not None and stall.enabled:
            self.stall_watch = StallWatch(self.http, d.base_url, stall).start()
        if d.managed:
            if self._echo is not None:
                d.listen(self._echo)
            try:
                self._started = True
                d.start()
            except BaseException:
                self.close()
                raise
        return self

    def close(self) -> Teardown | None:
        """Tear the deployment down (managed), keep the log's final snapshot in `final_log`
        and close the HTTP client. Safe to call twice."""
        if self._started and self.teardown is None:
            self.teardown = self.deployment.stop()
        if self.watcher is not None and self.final_log is None:
            self.final_log = self.watcher.stop()
        if self.stall_watch is not None:
            self.stall_watch.stop()
        self.http.close()
        return self.teardown

    def signal(self, sig: int) -> None:
        """Pass `sig` on to what runs here (every node's process group)."""
        self.deployment.signal(sig)

    def wait(self, poll_s: float = 0.2) -> int | None:
        """Block until the deployment ends (a placed one: or `abort()` names a reason); the
        exit code of a process here that ended, else None."""
        d = self.deployment
        aborted = self._abort if d.queued and self._abort is not None else lambda: None
        while d.managed and not (d.ended() or aborted() or self.stalled):
            d.wait_end(poll_s)
        return d.exit_code()

    # -- state --------------------------------------------------------------------------------
    def fatal_line(self) -> str | None:
        """The first fatal log line seen so far, as `pattern: line`."""
        if self.watcher is None or not self.watcher.fired.is_set():
            return None
        event = self.watcher.snapshot().fatal[0]
        return f"{event.pattern}: {event.line}"

    def exit_code(self, wait_s: float = 0.0) -> int | None:
        """The exit code of a process here (the head, or any other node) that ended."""
        return self.deployment.exit_code(wait_s)

    def stop_reason(self) -> str | None:
        """Why waiting on this server is pointless now, or None."""
        fatal = self.fatal_line()
        if fatal:
            return f"a fatal log line ({fatal})"
        reason = self._abort() if self._abort is not None else None
        if reason:
            return reason
        if self.stalled is not None:
            return self.stalled.reason
        return self.deployment.ended() if self._started else None

    @property
    def stalled(self) -> Stall | None:
        """The stall the watch saw (`watch.stall_s`): requests in the engine, no token."""
        return self.stall_watch.tripped if self.stall_watch is not None else None

    def stall_evidence(self) -> dict[str, object] | None:
        """The stall's counters and the log's last lines, for a record; None: no stall."""
        stall = self.stalled
        if stall is None:
            return None
        snapshot = self.log_snapshot()
        tail = (snapshot.tail[-TAIL_LINES:] if snapshot is not None
                else self.deployment.tail(TAIL_LINES))
        return {**stall.to_dict(), "log_tail": list(tail)}

    def log_snapshot(self) -> LogSnapshot | None:
        """The log as of now, read up to the current end of the file."""
        return self.watcher.catch_up() if self.watcher is not None else None

    # -- waits ----------------------------------------------------------------------------------
    def wait_healthy(self) -> float:
        """Seconds from start (a placed deployment: from when it runs) until /health answered
        200; ServerError (with `reason`) as soon as the deployment ends, a fatal line appears,
        `abort()` names a reason, or the timeout (`server.ready_timeout_s`) passes."""
        d = self.deployment
        timeout = self.watch.ready_timeout_s
        running_since = None if d.queued else self.started_at
        said, said_at = "", 0.0
        while True:
            reason = self.stop_reason()
            if reason:
                raise self._failure(f"{reason} before /health answered 200")
            url = d.base_url()
            now = time.monotonic()
            if url is not None and running_since is None:
                running_since = now
            status = probe.health(self.http, url) if url is not None else None
            if status == 200 and running_since is not None:
                return time.monotonic() - running_since
            if d.queued:
                note = d.describe() + (f", waiting for {url}/health" if url else "")
                if note != said or now - said_at >= PROGRESS_EVERY_S:
                    progress(f"{note} ({now - self.started_at:.0f} s)")
                    said, said_at = note, now
            elif (status in (probe.REFUSED, 404) and not d.managed
                  and time.monotonic() - self.started_at > self.watch.attach_refused_s):
                what = ("nothing listens at" if status == probe.REFUSED
                        else "no vLLM server (/health: 404) at")
                raise self._failure(f"{what} {d.planned_url} for "
                                    f"{self.watch.attach_refused_s:g} s; start the server, or "
                                    "fix server.url")
            if running_since is not None and time.monotonic() - running_since > timeout:
                raise self._failure(f"/health did not answer 200 within {timeout:.0f} s "
                                    "(server.ready_timeout_s)")
            self._pause(HEALTH_POLL_S)

    def _pause(self, seconds: float) -> None:
        """Until the next poll; over at once when the deployment ends or the log shows a
        fatal line (the next `stop_reason()` says which)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.watcher is not None and self.watcher.fired.is_set():
                return
            if self.deployment.wait_end(min(left, WAKE_S)):
                return

    def _failure(self, reason: str) -> ServerError:
        tail = self.deployment.tail(TAIL_LINES) if self.managed else ()
        return ServerError.failed(reason, self.deployment.log_path, tail)

    def scrape(self) -> Scrape:
        """/metrics now (ScrapeError on failure)."""
        return scrape(self.http, self.base_url, self.watch.metrics_timeout_s)

    def scrape_settled(self, before: Scrape, tokens: int | float) -> Scrape:
        """/metrics once the server's generation counter has caught up with `tokens` generated
        since `before`, or after `watch.metrics_settle_s`: a count that stays short is a real
        mismatch."""
        deadline = time.monotonic() + self.watch.metrics_settle_s
        after = self.scrape()
        while (after.delta(before).total(GENERATION_TOKENS) < tokens
               and time.monotonic() < deadline and not self.stop_reason()):
            time.sleep(SETTLE_POLL_S)
            after = self.scrape()
        return after

    def healthy(self) -> bool:
        return probe.healthy(self.http, self.base_url)

    def version(self) -> str | None:
        return probe.version(self.http, self.base_url)
