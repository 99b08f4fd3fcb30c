"""One server session, the same for `serve`, `smoke` and `bench`: start it (or attach to one),
wait until it is healthy while racing the log watcher and the process, read its metrics until
they settle, and tear it down into a frozen `Teardown`.

    with ServerSession(target) as session:      # managed: port check, scratch, process, watcher
        session.wait_healthy()                  # ServerError(reason=...) on death/fatal/timeout
        before = session.scrape()
        ...
        after = session.scrape_settled(before, tokens)
    session.teardown                            # None when attached: not ours to stop

What a session is given is a frozen `Target` (`target.py`). Attached (`target.argv is None`) is
the same interface over a running server: no start, no teardown, and log checks only when the
target names a log file.

Several nodes on this host (`deploy=local`, `hw.nodes` > 1): `target.argv` is the head's command
and `target.nodes` the others'. Each node is its own process group with its own TMPDIR, all
writing to the one log (the other nodes' lines start with `[node N] `, so one watcher sees a
fatal line of any node); a node that exits ends every wait, health is the head's `/health`, and
close tears every node down side by side into one `Teardown`.

On a cluster engine (`deploy=slurm`; `target.cluster`, see `deploy/cluster_run.py`): start
submits the deployment, the watcher follows its output as gathered on this host, health is asked
at the head's URL once the engine knows it, the run's `ended()` counts as a node's exit, the
ready timeout counts from the moment it runs (a queue's wait is not the server's), and close
cancels it and waits until the engine says it is gone.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dspark_cli.console import progress
from dspark_cli.errors import ServerError, UsageError
from dspark_cli.server import probe
from dspark_cli.server.logscan import LogSnapshot, LogWatcher
from dspark_cli.server.metrics import GENERATION_TOKENS, Scrape, scrape
from dspark_cli.server.process import ServerProcess, Teardown, ensure_port_free
from dspark_cli.server.target import Target

HEALTH_POLL_S = 0.1
# Attached: how long connections may be refused before nothing listening is the verdict (not
# `ready_timeout_s`, which is for a server that is booting).
ATTACH_REFUSED_S = 2.0
SETTLE_S = 3.0  # vLLM may count a request's last tokens just after answering it
SETTLE_POLL_S = 0.1
PROGRESS_EVERY_S = 15.0  # a cluster deployment's state while waiting: on change, else this often
TAIL_LINES = 15


class ServerSession:
    """A context manager over one server; see the module docstring."""

    def __init__(self, target: Target, *, echo: Callable[[str], None] | None = None,
                 abort: Callable[[], str | None] | None = None) -> None:
        """`echo` gets every output line of a managed server; `abort()` names a reason to stop
        waiting (a background check's rejection, a signal), or None."""
        self.target = target
        self._echo, self._abort = echo, abort
        self.process: ServerProcess | None = None  # the head
        self.nodes: list[ServerProcess] = []  # the other nodes, rank order
        self.watcher: LogWatcher | None = None
        self.teardown: Teardown | None = None
        self.final_log: LogSnapshot | None = None
        self.started_at = 0.0
        self._scratch: list[Path] = []
        self.cluster = target.cluster
        self._cluster_started = False

    @property
    def managed(self) -> bool:
        return self.target.managed

    @property
    def base_url(self) -> str:
        """Where the server answers: a cluster deployment's head once known, else the
        target's URL."""
        url = self.cluster.base_url() if self.cluster is not None else None
        return url or self.target.base_url

    # -- life ---------------------------------------------------------------------------------
    def __enter__(self) -> ServerSession:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> ServerSession:
        """Managed: refuse a busy port, give every node a private TMPDIR, start the processes
        and the log watcher; or submit the cluster deployment and watch its output. Attached:
        only watch the given log, if any."""
        t = self.target
        if not t.managed and (problem := probe.url_problem(t.base_url)):
            raise UsageError(f"server.url={t.base_url!r} cannot be attached to: {problem}.",
                             hint="give the running server's URL, e.g. http://127.0.0.1:8000")
        if t.argv is not None:
            for port in (t.port, *(n.port for n in t.nodes if n.port is not None)):
                ensure_port_free(t.host, port)
            assert t.log_path is not None
            grace = t.stop_grace_s
            self.process = ServerProcess(t.argv, self._env(t.env), t.log_path, t.host, t.port,
                                         grace=grace)
            self.nodes = [ServerProcess(n.argv, self._env(n.env), t.log_path, t.host, n.port,
                                        prefix=n.prefix, grace=grace) for n in t.nodes]
        if t.log_path is not None:
            self.watcher = LogWatcher(t.log_path, t.fatal, t.watch,
                                      context=t.context_lines).start()
        self.started_at = time.monotonic()
        if self.cluster is not None:
            try:
                self._cluster_started = True
                self.cluster.start()
            except BaseException:
                self.close()
                raise
        for process in self._processes():
            if self._echo is not None:
                process.add_listener(self._echo)
            try:
                process.start()
            except ServerError:
                self.close()
                raise
        return self

    def _env(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` with a fresh private TMPDIR: vLLM leaves sockets and vllm_dist_* files there;
        short, because ZeroMQ's IPC socket paths must fit in 107 bytes. Removed at close."""
        scratch = Path(tempfile.mkdtemp(prefix="dspark-"))
        self._scratch.append(scratch)
        return {**env, "TMPDIR": str(scratch)}

    def _processes(self) -> list[ServerProcess]:
        return [p for p in (self.process, *self.nodes) if p is not None]

    def close(self) -> Teardown | None:
        """Managed: SIGTERM, SIGKILL after the grace, confirm nothing is left (every node side
        by side); the log's final snapshot is kept in `final_log`. Safe to call twice."""
        processes = self._processes()
        if processes and self.teardown is None:
            grace = self.target.stop_grace_s
            with ThreadPoolExecutor(len(processes)) as pool:
                parts = list(pool.map(lambda p: p.stop(grace), processes))
            self.teardown = parts[0] if len(parts) == 1 else Teardown.combined(parts)
        if self.cluster is not None and self._cluster_started and self.teardown is None:
            self.teardown = self.cluster.stop(self.target.stop_grace_s)
        if self.watcher is not None and self.final_log is None:
            self.final_log = self.watcher.stop()
        for scratch in self._scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        self._scratch = []
        return self.teardown

    def signal(self, sig: int) -> None:
        """Send `sig` to every node's process group."""
        for process in self._processes():
            process.signal_group(sig)

    def wait(self, poll_s: float = 0.2) -> int | None:
        """Block until a node's process exits; its exit code (None when nothing runs). A
        cluster deployment: until it ends or `abort()` names a reason (None)."""
        if self.cluster is not None:
            while not (self.cluster.ended() or (self._abort is not None and self._abort())):
                time.sleep(poll_s)
            return None
        while self._processes():
            code = self.exit_code()
            if code is not None:
                return code
            time.sleep(poll_s)
        return None

    # -- state --------------------------------------------------------------------------------
    def fatal_line(self) -> str | None:
        """The first fatal log line seen so far, as `pattern: line`."""
        if self.watcher is None or not self.watcher.fired.is_set():
            return None
        event = self.watcher.snapshot().fatal[0]
        return f"{event.pattern}: {event.line}"

    def exit_code(self, wait_s: float = 0.0) -> int | None:
        """The managed server's exit code if it (the head, or any other node) ended; `wait_s`
        waits for an exit that a dropped connection announces a moment early."""
        if self.process is None:
            return None
        if wait_s and self.process.alive():
            self.process.wait(wait_s)
        dead = self.dead_node()
        return dead[1] if dead is not None else None

    def dead_node(self) -> tuple[int, int] | None:
        """(rank, exit code) of the first node whose process ended (the head is rank 0)."""
        for rank, process in enumerate(self._processes()):
            if process.returncode is not None:
                return (self.target.nodes[rank - 1].rank if rank else 0), process.returncode
        return None

    def stop_reason(self) -> str | None:
        """Why waiting on this server is pointless now, or None."""
        fatal = self.fatal_line()
        if fatal:
            return f"a fatal log line ({fatal})"
        reason = self._abort() if self._abort is not None else None
        if reason:
            return reason
        if self.cluster is not None and self._cluster_started:
            return self.cluster.ended()
        dead = self.dead_node()
        if dead is None:
            return None
        rank, code = dead
        who = f"node {rank} of {1 + len(self.nodes)}" if self.nodes else "the server"
        return f"{who} exited with code {code}"

    def log_snapshot(self) -> LogSnapshot | None:
        """The log as of now, read up to the current end of the file."""
        return self.watcher.catch_up() if self.watcher is not None else None

    # -- waits ----------------------------------------------------------------------------------
    def wait_healthy(self) -> float:
        """Seconds from start (a cluster deployment: from when it runs) until /health answered
        200; ServerError (with `reason`) as soon as the process dies or the deployment ends, a
        fatal line appears, `abort()` names a reason, or the timeout (`server.ready_timeout_s`)
        passes."""
        timeout = self.target.ready_timeout_s
        running_since = None if self.cluster is not None else self.started_at
        said, said_at = "", 0.0
        while True:
            reason = self.stop_reason()
            if reason:
                raise self._failure(f"{reason} before /health answered 200")
            url = self.cluster.base_url() if self.cluster is not None else self.base_url
            now = time.monotonic()
            if url is not None and running_since is None:
                running_since = now
            status = probe.health(url) if url is not None else None
            if status == 200 and running_since is not None:
                return time.monotonic() - running_since
            if self.cluster is not None:
                note = self.cluster.describe() + (f", waiting for {url}/health" if url else "")
                if note != said or now - said_at >= PROGRESS_EVERY_S:
                    progress(f"{note} ({now - self.started_at:.0f} s)")
                    said, said_at = note, now
            elif (status in (probe.REFUSED, 404) and not self.managed
                  and time.monotonic() - self.started_at > ATTACH_REFUSED_S):
                what = ("nothing listens at" if status == probe.REFUSED
                        else "no vLLM server (/health: 404) at")
                raise self._failure(f"{what} {self.target.base_url} for "
                                    f"{ATTACH_REFUSED_S:.0f} s; start the server, or fix "
                                    "server.url")
            if running_since is not None and time.monotonic() - running_since > timeout:
                raise self._failure(f"/health did not answer 200 within {timeout:.0f} s "
                                    "(server.ready_timeout_s)")
            time.sleep(HEALTH_POLL_S)

    def _failure(self, reason: str) -> ServerError:
        tail = tuple(line for p in self._processes() for line in p.tail(TAIL_LINES))
        if self.cluster is not None:
            tail = _file_tail(self.cluster.log_path)
        return ServerError.failed(reason, self.target.log_path, tail)

    def scrape(self) -> Scrape:
        """/metrics now (ScrapeError on failure)."""
        return scrape(self.base_url, self.target.metrics_timeout_s)

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
        return probe.healthy(self.base_url)

    def version(self) -> str | None:
        return probe.version(self.base_url)


def _file_tail(path: Path, n: int = TAIL_LINES) -> tuple[str, ...]:
    try:
        return tuple(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ()
