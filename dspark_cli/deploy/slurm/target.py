"""`deploy=slurm`'s entry: the plan's nodes as one sbatch job (`job.py` renders its script,
submits it and follows it through Slurm's clients)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.deploy.cluster import cluster_json
from dspark_cli.deploy.slurm.job import SbatchSpec, require_clients, sbatch_script, slurm_run
from dspark_cli.deploy.target import DeployTarget, Launch
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.server.deployment import Deployment
from dspark_cli.status import Finding

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


def sbatch_spec(cfg: LaunchConf) -> SbatchSpec:
    s = cfg.deploy.slurm
    assert cfg.hw is not None  # composed by every command that launches (null: verify-checkpoint's)
    return SbatchSpec(job_name=str(s.job_name), time=str(s.time), partition=s.partition,
                      account=s.account, qos=s.qos, extra=tuple(str(x) for x in s.sbatch),
                      setup=tuple(str(x) for x in s.setup),
                      gpus=str(cfg.hw.platform) != "cpu")


def render(cfg: LaunchConf, plan: LaunchPlan) -> str:
    return sbatch_script(plan.layout, sbatch_spec(cfg), plan.env)


def render_json(cfg: LaunchConf, plan: LaunchPlan,
                findings: tuple[Finding, ...]) -> dict[str, Any]:
    return cluster_json("slurm", plan.layout, {"script": render(cfg, plan)}, findings)


def deployment(launch: Launch, directory: Path) -> Deployment:
    cfg = launch.cfg
    return slurm_run(launch.plan, sbatch_spec(cfg), directory,
                     poll_s=float(cfg.deploy.slurm.poll_s),
                     stop_timeout_s=float(cfg.deploy.slurm.cancel_timeout_s))


TARGET = DeployTarget(
    name="slurm",
    what="Slurm job",
    here=False,
    render=render,
    render_json=render_json,
    deployment=deployment,
    require=require_clients,
)
