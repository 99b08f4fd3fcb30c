"""Process groups on this host as a `Deployment`: one node (today's launch), or every node of a
multi-node layout (`deploy=local`, `hw.nodes` > 1) side by side.

Each node is its own process group with its own TMPDIR, all writing to the one log (the other
nodes' lines start with `[node N] `, so one watcher sees a fatal line of any node); a node that
exits ends the deployment, health is the head's, and `stop` tears every node down side by side
into one `Teardown`.
"""

from __future__ import annotations

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

from dspark_cli.errors import ServerError
from dspark_cli.server.deployment import Deployment
from dspark_cli.server.process import ServerProcess, Teardown, ensure_port_free


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
