"""An arm made startable where its deploy target runs it, through the one start step
(`deploy/start.py`): the checks, the model and the arm's run record happen once, before the
first boot; each cell then gets a fresh deployment whose files (log, job script) go into the
cell's directory."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dspark_cli.bench.arms import Arm
from dspark_cli.server.deployment import Deployment
from dspark_cli.vllm.accepts import Verdicts


@dataclass(frozen=True)
class ArmLaunch:
    """What every cell of an arm starts: `deployment(cell_dir)`; `argv` is the head's command
    for the record, `env` the load generator's environment, `ready_timeout_s` and
    `metrics_settle_s` the arm's (server.*)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    deployment: Callable[[Path], Deployment]
    ready_timeout_s: float
    metrics_settle_s: float


def arm_launch(arm: Arm, record_dir: Path, verdicts: Verdicts | None = None) -> ArmLaunch:
    """Check and prepare `arm` (CheckFailed/UsageError before anything boots), writing its run
    record into `record_dir`; `verdicts`: vLLM's answers the command already has."""
    from dspark_cli.deploy.start import ready

    start = ready(arm.cfg, arm.plan, record_dir, check_port=False, verdicts=verdicts)
    return ArmLaunch(start.head_argv, start.load_env, start.deployment,
                     float(arm.cfg.server.ready_timeout_s),
                     float(arm.cfg.server.metrics_settle_s))
