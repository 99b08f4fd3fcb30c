"""The server session, the same for `serve`, `smoke` and `bench`: start its deployment (or
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
server (`AttachedServer`: `server.url=URL`, nothing to start or stop, its URL checked before
anything waits on it, its log `server.log=FILE` watched when given), a Slurm job, Kubernetes
objects; the session treats them alike. One an engine places (`queued`) is asked at
its head's URL once the engine knows it, and its ready timeout counts from that moment (a
queue's wait is not the server's). The HTTP probes (`health`, `version`) each have their own
timeout: a hung server never hangs dspark.

`serve()` is `dspark serve`'s action: a managed session in the foreground until the server
exits or we are told to stop. SIGINT/SIGTERM go to the server's process groups (a SIGHUP, from
a closed terminal or a dropped ssh session, as SIGTERM; a second signal kills them), and the
session's teardown makes sure no process is left. A deployment an engine places (Slurm,
Kubernetes) is followed until it ends; a signal cancels it, and dspark waits until the engine
says it is gone.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from dspark_cli.console import progress
from dspark_cli.errors import ExitCode, ServerError
from dspark_cli.server.deployment import Deployment, Watch
from dspark_cli.server.http import SMALL_BODY, exchange
from dspark_cli.server.liveness import Stall, StallWatch
from dspark_cli.server.logscan import LogSnapshot, LogWatcher
from dspark_cli.server.metrics import GENERATION_TOKENS, Scrape, scrape
from dspark_cli.server.process import STOP_SIGNALS, Teardown

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
            status = health(self.http, url) if url is not None else None
            if status == 200 and running_since is not None:
                return time.monotonic() - running_since
            if d.queued:
                note = d.describe() + (f", waiting for {url}/health" if url else "")
                if note != said or now - said_at >= PROGRESS_EVERY_S:
                    progress(f"{note} ({now - self.started_at:.0f} s)")
                    said, said_at = note, now
            elif (not_vllm(status) and not d.managed
                  and time.monotonic() - self.started_at > self.watch.attach_refused_s):
                what = ("nothing listens at" if status == REFUSED
                        else f"no vLLM server (/health: {status}) at")
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
        return healthy(self.http, self.base_url)

    def version(self) -> str | None:
        return version(self.http, self.base_url)


PROBE_TIMEOUT_S = 2.0


def healthy(client: httpx.Client, base_url: str) -> bool:
    """Whether `/health` answers 200 right now."""
    return health(client, base_url) == 200


# `health()` when no connection could be made: nothing listens there, or the host is unknown
# or unreachable.
REFUSED = -1


def health(client: httpx.Client, base_url: str) -> int | None:
    """`/health`'s status code now; REFUSED when no connection could be made, None when a
    connection was made but gave no answer in time."""
    try:
        return exchange(client, "GET", base_url + "/health", deadline_s=PROBE_TIMEOUT_S,
                        max_bytes=SMALL_BODY).status_code
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return REFUSED
    except httpx.HTTPError:
        return None


def not_vllm(status: int | None) -> bool:
    """Whether `/health`'s status says no vLLM server answers there: nothing listens, no such
    path, or a redirect elsewhere (vLLM's /health never redirects; dspark does not follow)."""
    return status is not None and (status in (REFUSED, 404) or 300 <= status < 400)


def version(client: httpx.Client, base_url: str) -> str | None:
    """The server's `/version`, or None when it does not say."""
    try:
        answer = exchange(client, "GET", base_url + "/version", deadline_s=PROBE_TIMEOUT_S,
                          max_bytes=SMALL_BODY)
        return str(answer.json()["version"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def serve(deployment: Deployment, watch: Watch, stall_exit: bool = False) -> int:
    """Run the server; exit code INTERRUPTED after a signal, ServerError when it fails or
    exits on its own. With a stall watch (`watch.stall`), a stall prints one line; with
    `stall_exit`, it also stops the server (ServerError, exit 3)."""
    received: list[int] = []
    session = ServerSession(deployment, watch,
                            echo=lambda line: print(line, file=sys.stderr, flush=True),
                            abort=lambda: "interrupted" if received else None)

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        session.signal(signal.SIGKILL if len(received) > 1
                       else signal.SIGTERM if signum == signal.SIGHUP else signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, *STOP_SIGNALS)}
    try:
        with session:
            try:
                boot = session.wait_healthy()
            except ServerError:
                if received:
                    return _stopped(session)
                raise
            stops = (f" ({deployment.describe()}); Ctrl-C cancels it" if deployment.queued
                     else "; Ctrl-C stops it")
            print(f"dspark: ready at {session.base_url} after {boot:.1f} s{stops}",
                  file=sys.stderr, flush=True)
            code, ended = _wait(session, stall_exit)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    _check_teardown(session)
    if received:
        return _stopped(session)
    if deployment.queued:
        raise ServerError(f"{ended} on its own; its output: {deployment.log_path}")
    raise ServerError(f"the server exited with code {code}; log: {deployment.log_path}")


def _wait(session: ServerSession, stall_exit: bool) -> tuple[int | None, str | None]:
    """Until the server ends (or stalls, with `stall_exit`): its exit code and why it ended."""
    while True:
        code = session.wait()
        stall = session.stalled
        if stall is None or code is not None:
            return code, session.stop_reason()
        if stall_exit:  # the one line is the error's
            raise ServerError(f"{stall.reason}; the server was stopped (watch.serve_exit)",
                              reason=stall.reason)
        print(f"dspark: {stall.reason}", file=sys.stderr, flush=True)
        if session.stall_watch is not None:  # it tripped, so it runs: watch for the next one
            session.stall_watch.rearm()


def _check_teardown(session: ServerSession) -> None:
    teardown = session.teardown
    if teardown is not None and teardown.leftover_pids:
        raise ServerError(f"processes {list(teardown.leftover_pids)} outlived the teardown")
    if teardown is not None and not teardown.deployment_gone:
        raise ServerError(f"{teardown.deployment} did not leave the engine after it was "
                          "cancelled; check it with the engine's own tools")


def _stopped(session: ServerSession) -> int:
    session.close()
    _check_teardown(session)
    with contextlib.suppress(OSError):  # a hangup may have closed the terminal
        print("dspark: stopped.", file=sys.stderr)
    return int(ExitCode.INTERRUPTED)
