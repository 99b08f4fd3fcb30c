"""The one interface a server session drives, whatever runs the server: process groups on this
host (`local.py`), a server that already runs (`attached.py`), a Slurm job or Kubernetes objects
(`deploy/slurm_run.py`, `deploy/k8s_run.py`).

    start()     submit/apply/spawn; returns once it was accepted (ServerError/UsageError)
    base_url()  where its API answers; None while an engine has not placed it yet
    ended()     why it no longer runs ("node 1 of 2 exited with code 3", "Slurm job 12 FAILED")
    describe()  one line for progress ("Slurm job 12 running on n[1-2]")
    stop()      tear it down and confirm nothing is left: a Teardown (None: not ours to stop)

A deployment an engine places (`queued`) has its ready timeout counted from the moment its URL
is known: a queue's wait is not the server's. `Watch` is what the session watches while it runs.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dspark_cli.server.liveness import StallSettings
from dspark_cli.server.log_patterns import Pattern

if TYPE_CHECKING:  # a dry run plans deployments without loading psutil
    from dspark_cli.server.process import Teardown


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
