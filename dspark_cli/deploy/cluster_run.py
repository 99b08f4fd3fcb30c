"""The one interface between the server session (`server/session.py`) and a cluster engine: a
deployment that Slurm or Kubernetes runs for one managed `serve`, `smoke` or `bench` cell.

The session treats a `ClusterRun` as it treats local process groups: it races `/health` against
`ended()` and the log watcher on `log_path`, counts the ready timeout from the moment
`base_url()` is known (a queue's wait is not the server's), and tears it down with `stop()` on
every path, Ctrl-C and SIGTERM included.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dspark_cli.errors import UsageError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from dspark_cli.launch.layout import NodeLayout
    from dspark_cli.launch.plan import LaunchPlan
    from dspark_cli.server.process import Teardown
    from dspark_cli.server.target import Target


class ClusterRun(Protocol):
    """A deployment a cluster engine runs for one managed server session."""

    log_path: Path  # the deployment's output, gathered on this host (watched for fatal lines)

    def start(self) -> None:
        """Submit/apply; returns once the engine accepted it; ServerError/UsageError."""

    def base_url(self) -> str | None:
        """The head's API URL once known (None while pending)."""

    def ended(self) -> str | None:
        """Why it no longer runs (e.g. "Slurm job 12 FAILED"), None while pending/running."""

    def describe(self) -> str:
        """One line for progress, e.g. "Slurm job 12 running on n[1-2]"."""

    def stop(self, timeout_s: float) -> Teardown:
        """Cancel/delete, wait until gone; a Teardown."""


def cluster_run(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout,
                directory: Path) -> ClusterRun:
    """The deployment of `layout` on `cfg.deploy.target`'s engine, its files in `directory`;
    nothing is submitted until `start()`."""
    target = str(cfg.deploy.target)
    if target == "slurm":
        from dspark_cli.deploy.slurm_run import slurm_run

        return slurm_run(cfg, plan, layout, directory)
    if target == "k8s":
        from dspark_cli.deploy.k8s_run import kubernetes_run

        return kubernetes_run(cfg, plan, layout, directory)
    raise UsageError(f"deploy.target={target!r} is not a cluster engine; use deploy=slurm or "
                     "deploy=k8s (deploy=local runs on this host).")


def cluster_target(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout, directory: Path,
                   **watch: Any) -> Target:
    """The managed session's target for a deployment on the cluster engine, its files (job
    script, output) in `directory`; `watch`: the fatal/watch patterns and metrics timeout."""
    from dspark_cli.server.target import Target

    run = cluster_run(cfg, plan, layout, directory)
    return Target(plan.base_url, plan.client_host, plan.port, run.log_path,
                  float(cfg.server.ready_timeout_s), stop_timeout_s(cfg), cluster=run, **watch)


def stop_timeout_s(cfg: DictConfig) -> float:
    """How long a cancelled deployment may take to leave the engine (its own setting)."""
    target = str(cfg.deploy.target)
    if target == "slurm":
        return float(cfg.deploy.slurm.cancel_timeout_s)
    return float(cfg.server.stop_grace_s)


def prepare(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout, directory: Path) -> None:
    """Make a plan startable on the cluster engine by a managed `smoke` or `bench`, as
    `dspark serve deploy=...` does: a command of its own (`server.command`) is refused; the
    preflight rules that need no machine (the machine is the
    cluster's) must pass; then the model it needs and the run record (config, launch, every
    node's command) in `directory`. Nothing is submitted here."""
    from dspark_cli.deploy.command import target_findings
    from dspark_cli.errors import CheckFailed
    from dspark_cli.launch import checks
    from dspark_cli.launch.local_nodes import write_script
    from dspark_cli.launch.prepare import ensure_model
    from dspark_cli.launch.provenance import collect
    from dspark_cli.launch.record import write_record
    from dspark_cli.vllm.shim import vllm_command

    target = str(cfg.deploy.target)
    if target == "slurm":
        from dspark_cli.deploy.slurm_job import require_clients

        require_clients()  # before anything is written
    if cfg.server.command is not None:
        raise UsageError(f"server.command replaces the command dspark starts on this host, but "
                         f"deploy={target} runs the plan's node commands on the cluster; drop "
                         "server.command, or use deploy=local.")
    findings = (*checks.check(cfg, plan, machine=None, ask_vllm=False), *target_findings(cfg))
    checks.print_findings(findings)
    if any(f.failed for f in findings):
        raise CheckFailed("preflight failed; nothing was submitted (details above).")
    ensure_model(cfg)
    write_record(directory, cfg, plan, vllm_command(plan.argv), collect(plan.model_path, None),
                 [f"deploy={target}: the cluster engine runs every node's command (the job "
                  "script of each start; nodes.sh for several nodes)"])
    write_script(layout, directory)
