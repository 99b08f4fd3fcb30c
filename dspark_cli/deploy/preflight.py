"""A dry run's preflight, wherever the plan would run (pure but for vLLM's verdict, when asked):
`serve`, `bench` and `validate` print the same findings for the same plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dspark_cli.deploy.target_entry import DeployTarget
from dspark_cli.launch import checks
from dspark_cli.launch.checks import node_verdicts
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.rules import layout_findings
from dspark_cli.status import Finding

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


def dry_preflight(cfg: LaunchConf, plan: LaunchPlan, target: DeployTarget,
                  validate: bool = False) -> tuple[Finding, ...]:
    """What a dry run checks wherever the plan would run: the rules that need no machine, the
    node layout's and the target's own (the k8s image pinned); vLLM's verdict on every node's
    command when asked (`--validate`)."""
    found = (*checks.check(cfg, plan, machine=None, ask_vllm=False),
             *layout_findings(plan), *target.findings(cfg))
    return (*found, *node_verdicts(plan, cfg.server.validate_timeout_s)) if validate else found
