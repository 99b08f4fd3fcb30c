"""What a deploy target is (one entry of the registry in `targets.py`) and what it is given to
start: a checked plan as it runs on this host."""

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
    """One target; see `targets.py` for what each part does."""

    name: str
    what: str  # what one start of it is, for people: "Slurm job"
    here: bool
    render: Callable[[LaunchConf, LaunchPlan], str]
    render_json: Callable[[LaunchConf, LaunchPlan, tuple[Finding, ...]], dict[str, Any]]
    findings: Callable[[LaunchConf], tuple[Finding, ...]]
    deployment: Callable[[Launch, Path], Deployment]
    require: Callable[[], None] = lambda: None
    hand_off: Callable[[LaunchConf, LaunchPlan, Path], int] | None = None

