"""What a server session is given: where the server is (or is to be started: its command and
environment, the other nodes of a multi-node launch on this host, or a cluster engine's run) and
what to watch in its log. Plain frozen values; `session.py` acts on them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dspark_cli.server.logscan import Pattern

if TYPE_CHECKING:
    from dspark_cli.deploy.cluster_run import ClusterRun


@dataclass(frozen=True)
class NodeProcess:
    """A node of a multi-node launch that runs on this host beside the head."""

    rank: int
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    port: int | None = None  # its API port (hybrid load balancing); None: headless

    @property
    def prefix(self) -> str:
        return f"[node {self.rank}] "


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
    nodes: tuple[NodeProcess, ...] = ()  # the other nodes of a multi-node launch (managed)
    # A deployment a cluster engine runs (managed; `base_url` is only the planned URL then,
    # the run says the real one once it runs); `log_path` is the run's.
    cluster: ClusterRun | None = None

    @property
    def managed(self) -> bool:
        return self.argv is not None or self.cluster is not None
