"""What a deploy target is, where a plan's nodes run (`deploy.target`: `local.py`, `slurm/`,
`k8s/`; the registry in `start.py` is the one place the name is looked up, everything else asks
the entry), and what it is given to start: a checked plan as it runs on this host.

    render(cfg, plan)                 the dry run's text (a script, a job script, manifests)
    render_json(cfg, plan, findings)  the dry run's --json document
    findings(cfg)                     its own preflight checks (the k8s image pinned; none: ())
    deployment(launch, directory)     one fresh `Deployment`, its files in `directory`
    require()                         its clients on this host, before anything is written
    hand_off(cfg, plan, dir)          `serve` without --apply: written for the operator to apply

`what` names one start of it for people; `here`: the nodes run on this host, so the machine's
rules, its ports and vLLM's own validation apply here (a cluster target's machine is the
cluster's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.server.deployment import Deployment
from dspark_cli.status import Finding

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


@dataclass(frozen=True)
class Launch:
    """A checked plan as a target starts it: the head's command and environment as run on this
    host (`server.command` or vLLM through the shim) beside every node's planned command
    (`plan.layout`)."""

    cfg: LaunchConf
    plan: LaunchPlan
    argv: tuple[str, ...]
    env: Mapping[str, str]


@dataclass(frozen=True)
class DeployTarget:
    """One target; the module docstring says what each part does."""

    name: str
    what: str  # what one start of it is, for people: "Slurm job"
    here: bool
    render: Callable[[LaunchConf, LaunchPlan], str]
    render_json: Callable[[LaunchConf, LaunchPlan, tuple[Finding, ...]], dict[str, Any]]
    deployment: Callable[[Launch, Path], Deployment]
    findings: Callable[[LaunchConf], tuple[Finding, ...]] = lambda cfg: ()
    require: Callable[[], None] = lambda: None
    hand_off: Callable[[LaunchConf, LaunchPlan, Path], int] | None = None

