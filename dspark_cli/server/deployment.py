"""The one interface a server session drives, whatever runs the server, and the one that runs
it here: process groups on this host (`LocalDeployment`), a server that already runs
(`AttachedServer`, `server.url=URL`, below: planned without loading the session or its HTTP
client), a Slurm job or Kubernetes objects (`deploy/slurm/job.py`, `deploy/k8s/run.py`).

    start()     submit/apply/spawn; returns once it was accepted (ServerError/UsageError)
    base_url()  where its API answers; None while an engine has not placed it yet
    ended()     why it no longer runs ("node 1 of 2 exited with code 3", "Slurm job 12 FAILED")
    describe()  one line for progress ("Slurm job 12 running on n[1-2]")
    stop()      tear it down and confirm nothing is left: a Teardown (None: not ours to stop)

A deployment an engine places (`queued`) has its ready timeout counted from the moment its URL
is known: a queue's wait is not the server's. `Watch` is what the session watches while it runs.

`LocalDeployment`: one node (today's launch), or every node of a multi-node layout
(`deploy=local`, `hw.nodes` > 1) side by side. Each node is its own process group with its own
TMPDIR, all writing to the one log (the other nodes' lines start with `[node N] `, so one
watcher sees a fatal line of any node); a node that exits ends the deployment, health is the
head's, and `stop` tears every node down side by side into one `Teardown`.
"""

from __future__ import annotations

import abc
import getpass
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from dspark_cli.errors import ServerError, UsageError
from dspark_cli.server.http import url_problem
from dspark_cli.server.liveness import StallSettings
from dspark_cli.server.logscan import Pattern
from dspark_cli.server.process import ServerProcess, Teardown, ensure_port_free


@dataclass(frozen=True)
class Watch:
    """What a session watches and how long it waits: /health (`ready_timeout_s`), the fatal
    and expected log lines, the context kept around a fatal one, each /metrics read; how long
    an attached URL may refuse connections before nothing listening is the verdict, and how
    long the generation counter may lag an answer before a short count is a mismatch."""

    ready_timeout_s: float
    fatal: tuple[Pattern, ...] = ()
    watch: tuple[Pattern, ...] = ()
    context_lines: int = 10
    metrics_timeout_s: float = 5.0
    attach_refused_s: float = 2.0  # not `ready_timeout_s`, which is for a server that boots
    metrics_settle_s: float = 3.0  # vLLM may count a request's last tokens just after answering
    stall: StallSettings | None = None  # the stall watch (liveness.py); None: not watched


class Deployment(abc.ABC):
    """Where one session's server runs; see the module docstring."""

    planned_url: str  # the URL the plan gives (a placed deployment's real one comes later)
    log_path: Path | None  # its output as gathered on this host (None: no log to watch)
    managed: bool = True  # ours to start and stop (False: attached)
    queued: bool = False  # an engine places it: its URL is known once it runs

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def base_url(self) -> str | None: ...

    @abc.abstractmethod
    def ended(self) -> str | None: ...

    @abc.abstractmethod
    def describe(self) -> str: ...

    @abc.abstractmethod
    def stop(self) -> Teardown | None: ...

    def exit_code(self, wait_s: float = 0.0) -> int | None:
        """A process of this host that ended: its exit code (`wait_s` waits for an exit that a
        dropped connection announces a moment early); None for anything else."""
        return None

    def wait_end(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for it to end; whether it has. A process here is waited on
        (its exit ends the wait); an engine's deployment is asked again at the next check."""
        time.sleep(timeout_s)
        return False

    def signal(self, sig: int) -> None:
        """Pass a signal on to what runs here (an engine's deployment is cancelled by `stop`)."""
        return None

    def listen(self, echo: Callable[[str], None]) -> None:
        """Hand every output line of what runs here to `echo` (before `start`)."""
        return None

    def tail(self, lines: int) -> tuple[str, ...]:
        """The last output lines, for an error message."""
        if self.log_path is None:
            return ()
        try:
            return tuple(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ()


@dataclass(frozen=True)
class NodeProcess:
    """One node's process: its command, environment and API port (None: headless)."""

    rank: int
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    port: int | None = None

    @property
    def prefix(self) -> str:
        return f"[node {self.rank}] " if self.rank else ""


def inductor_cache_dir(env: Mapping[str, str]) -> str:
    """torch Inductor's default cache directory for a process started with `env`:
    `<its TMPDIR>/torchinductor_<user>` (torch._inductor.runtime.cache_dir_utils)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's arbitrary uid)
        user = f"uid_{os.getuid()}"
    user = re.sub(r'[\\/:*?"<>|]', "_", user)
    temp = env.get("TMPDIR") or tempfile.gettempdir()
    return os.path.join(temp, f"torchinductor_{user}")


class LocalDeployment(Deployment):
    """The nodes of one launch as process groups here; the head (`nodes[0]`) serves `port`."""

    def __init__(self, nodes: tuple[NodeProcess, ...], host: str, port: int, log_path: Path,
                 stop_grace_s: float = 15.0, url: str | None = None) -> None:
        """`host`/`port`: where the head listens (`url`: where it is asked, by default there)."""
        self.nodes, self.host, self.port = nodes, host, port
        self.log_path: Path = log_path
        self.planned_url = url or f"http://{host}:{port}"
        self.stop_grace_s = stop_grace_s
        self.processes: list[ServerProcess] = []
        self._listeners: list[Callable[[str], None]] = []
        self._scratch: list[Path] = []
        self._teardown: Teardown | None = None

    def listen(self, echo: Callable[[str], None]) -> None:
        self._listeners.append(echo)

    def start(self) -> None:
        """Refuse a busy port, give every node a private TMPDIR, start every process."""
        for port in (self.port, *(n.port for n in self.nodes[1:] if n.port is not None)):
            ensure_port_free(self.host, port)
        self.processes = [ServerProcess(n.argv, self._env(n.env), self.log_path, self.host,
                                        self.port if not n.rank else n.port, prefix=n.prefix,
                                        grace=self.stop_grace_s)
                          for n in self.nodes]
        for process in self.processes:
            for echo in self._listeners:
                process.add_listener(echo)
            try:
                process.start()
            except ServerError:
                self.stop()
                raise

    def _env(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` with a fresh private TMPDIR: vLLM leaves sockets and vllm_dist_* files there;
        short, because ZeroMQ's IPC socket paths must fit in 107 bytes. Removed at stop. The
        compile caches stay where a hand-started vLLM keeps them, so a cold boot per cell costs
        no recompilation: vLLM's own (~/.cache/vllm), Triton's (~/.triton) and FlashInfer's
        (~/.cache/flashinfer) follow HOME, which is kept; torch Inductor's default follows
        TMPDIR, so it is pinned to the one the user's TMPDIR gives, unless they set it."""
        scratch = Path(tempfile.mkdtemp(prefix="dspark-"))
        self._scratch.append(scratch)
        out = {**env, "TMPDIR": str(scratch)}
        out.setdefault("TORCHINDUCTOR_CACHE_DIR", inductor_cache_dir(env))
        return out

    def base_url(self) -> str:
        return self.planned_url

    def dead_node(self) -> tuple[int, int] | None:
        """(rank, exit code) of the first node whose process ended (the head is rank 0)."""
        for node, process in zip(self.nodes, self.processes, strict=False):
            if process.returncode is not None:
                return node.rank, process.returncode
        return None

    def ended(self) -> str | None:
        dead = self.dead_node()
        if dead is None:
            return None
        rank, code = dead
        who = f"node {rank} of {len(self.nodes)}" if len(self.nodes) > 1 else "the server"
        return f"{who} exited with code {code}"

    def exit_code(self, wait_s: float = 0.0) -> int | None:
        if not self.processes:
            return None
        if wait_s and self.processes[0].alive():
            self.processes[0].wait(wait_s)
        dead = self.dead_node()
        return dead[1] if dead is not None else None

    def wait_end(self, timeout_s: float) -> bool:
        """Waits on the head's process (another node's exit is seen when this returns)."""
        if self.processes and self.processes[0].alive():
            self.processes[0].wait(timeout_s)
        elif not self.processes:
            time.sleep(timeout_s)
        return self.dead_node() is not None

    def describe(self) -> str:
        return (f"{len(self.nodes)} nodes on this host" if len(self.nodes) > 1
                else f"the server at {self.planned_url}")

    def signal(self, sig: int) -> None:
        for process in self.processes:
            process.signal_group(sig)

    def tail(self, lines: int) -> tuple[str, ...]:
        return tuple(line for p in self.processes for line in p.tail(lines))

    def stop(self) -> Teardown | None:
        """SIGTERM, SIGKILL after the grace, confirm nothing is left (every node side by side).
        Safe to call twice."""
        if self.processes and self._teardown is None:
            grace = self.stop_grace_s
            with ThreadPoolExecutor(len(self.processes)) as pool:
                parts = list(pool.map(lambda p: p.stop(grace), self.processes))
            self._teardown = parts[0] if len(parts) == 1 else Teardown.combined(parts)
        for scratch in self._scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        self._scratch = []
        return self._teardown


class AttachedServer(Deployment):
    """Not ours: `stop()` leaves it running and gives no teardown."""

    managed = False

    def __init__(self, url: str, log_path: Path | None = None) -> None:
        self.planned_url, self.log_path = url, log_path

    def start(self) -> None:
        if problem := url_problem(self.planned_url):
            raise UsageError(f"server.url={self.planned_url!r} cannot be attached to: "
                             f"{problem}.", hint="give the running server's URL, e.g. "
                             "http://127.0.0.1:8000")

    def base_url(self) -> str:
        return self.planned_url

    def ended(self) -> str | None:
        return None

    def describe(self) -> str:
        return f"the server at {self.planned_url}"

    def stop(self) -> None:
        return None
