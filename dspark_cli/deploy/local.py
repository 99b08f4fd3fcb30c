"""`deploy=local`: every node of the plan runs on this host as its own process group, the head's
address 127.0.0.1 (one node: today's launch, untouched)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.deploy.target import DeployTarget, Launch
from dspark_cli.launch import vllm_options
from dspark_cli.launch.checks import LOCAL_HEAD
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.render import layout_dict, layout_script, plan_dict, shell_script
from dspark_cli.paths import SERVER_LOG
from dspark_cli.server.deployment import Deployment, LocalDeployment, NodeProcess
from dspark_cli.status import Finding
from dspark_cli.vllm.shim import vllm_command

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


def render(cfg: LaunchConf, plan: LaunchPlan) -> str:
    """The plan's script (one node), or every node's block."""
    return layout_script(plan.layout) if plan.layout.nodes > 1 else shell_script(plan)


def render_json(cfg: LaunchConf, plan: LaunchPlan,
                findings: tuple[Finding, ...]) -> dict[str, Any]:
    doc = {**plan_dict(plan), "vllm_options": vllm_options.source().to_dict(),
           "preflight": [f.to_dict() for f in findings]}
    return {**doc, "layout": layout_dict(plan.layout)} if plan.layout.nodes > 1 else doc


def deployment(launch: Launch, directory: Path) -> Deployment:
    """The head's command as `launch` runs it; the other nodes' through the shim, beside it."""
    plan, layout = launch.plan, launch.plan.layout
    nodes = [NodeProcess(0, launch.argv, dict(launch.env), plan.port)]
    if layout.nodes > 1:
        nodes = [NodeProcess(n.rank, tuple(vllm_command(n.resolved(LOCAL_HEAD))),
                             {**launch.env, **n.env}, n.api_port if n.serves_api else None)
                 for n in layout.launches]
    return LocalDeployment(tuple(nodes), plan.client_host, plan.port, directory / SERVER_LOG,
                           float(launch.cfg.server.stop_grace_s), url=plan.base_url)


TARGET = DeployTarget(
    name="local",
    what="server on this host",
    here=True,
    render=render,
    render_json=render_json,
    deployment=deployment,
)
