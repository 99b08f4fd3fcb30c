"""Which deploy targets a command may start by itself: `serve` hands the plan to Slurm or
Kubernetes; `smoke` and `bench` manage servers on this host, so on a cluster target they attach
to the deployment `serve` started (`server.url`) instead of silently launching it here."""

from __future__ import annotations

from omegaconf import DictConfig

from dspark_cli.errors import UsageError

CLUSTER_TARGETS = ("slurm", "k8s")


def refuse_cluster_target(cfg: DictConfig, command: str) -> None:
    """UsageError when `command` would start a cluster target's server on this host."""
    target = str(cfg.deploy.target)
    if target in CLUSTER_TARGETS and cfg.server.url is None:
        raise UsageError(
            f"`dspark {command}` starts its server on this host, but deploy={target} runs on the "
            f"cluster: start it with `dspark serve deploy={target} ...`, then run `dspark "
            f"{command} deploy={target} server.url=http://<head>:<port>` against it (or drop "
            "deploy= to run here).")
