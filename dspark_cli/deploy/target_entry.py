"""What a deploy target is (one entry of the registry in `targets.py`) and what it is given to
start: a checked plan as it runs on this host."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.server.deployment import Deployment
from dspark_cli.status import Finding


@dataclass(frozen=True)
class Launch:
    """A checked plan as a target starts it: the head's command and environment as run on this
    host (`server.command` or vLLM through the shim) beside every node's planned command
    (`plan.layout`)."""

    cfg: DictConfig
    plan: LaunchPlan
    argv: tuple[str, ...]
    env: Mapping[str, str]


@dataclass(frozen=True)
class DeployTarget:
    """One target; see `targets.py` for what each part does."""

    name: str
    what: str  # what one start of it is, for people: "Slurm job"
    here: bool
    render: Callable[[DictConfig, LaunchPlan], str]
    render_json: Callable[[DictConfig, LaunchPlan, tuple[Finding, ...]], dict[str, Any]]
    findings: Callable[[DictConfig], tuple[Finding, ...]]
    deployment: Callable[[Launch, Path], Deployment]
    require: Callable[[], None] = lambda: None
    hand_off: Callable[[DictConfig, LaunchPlan, Path], int] | None = None

