"""The deploy targets, one entry each: where a plan's nodes run (`deploy.target`). This is the
one place the name is looked up; everything else asks the entry.

    render(cfg, plan)                 the dry run's text (a script, a job script, manifests)
    render_json(cfg, plan, findings)  the dry run's --json document
    findings(cfg)                     the target's own preflight checks (the k8s image pinned)
    deployment(launch, directory)     one fresh `Deployment`, its files in `directory`
    require()                         its clients on this host, before anything is written
    hand_off(cfg, plan, dir)         `serve` without --apply: written for the operator to apply

`what` names one start of it for people; `here`: the nodes run on this host, so the machine's
rules, its ports and vLLM's own validation apply here (a cluster target's machine is the
cluster's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dspark_cli.deploy import k8s_target, local_target, slurm_target
from dspark_cli.deploy.target_entry import DeployTarget
from dspark_cli.errors import UsageError

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf

TARGETS: dict[str, DeployTarget] = {
    t.name: t for t in (local_target.TARGET, slurm_target.TARGET, k8s_target.TARGET)}


def deploy_target(cfg: LaunchConf) -> DeployTarget:
    """The entry `deploy.target` names; UsageError naming the known ones otherwise."""
    name = str(cfg.deploy.target)
    if name not in TARGETS:
        known = ", ".join(f"deploy={n}" for n in TARGETS)
        raise UsageError(f"deploy.target={name!r} is not a deploy target here; use {known}")
    return TARGETS[name]
