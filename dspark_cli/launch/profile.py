"""The profile facts a rule needs that are not part of the command vLLM runs: which hardware
profile (its platform, GPUs per node, GPU name patterns), how many nodes and their ports, and
the model family. Taken from the config once, when the plan is built, so rules judge the plan
and the machine, never the config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dspark_cli.config.choices import Platform

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


@dataclass(frozen=True)
class Profile:
    hw_name: str
    platform: Platform
    num_gpus: int  # per node
    nodes: int
    detect: tuple[str, ...]  # GPU name/arch patterns of the hw profile
    family: str | None  # the model family (model.family)
    dp_rpc_port: int  # hw.dp_rpc_port (the dp layouts)
    master_port: int  # hw.master_port (the tp layout)


def profile_of(cfg: LaunchConf) -> Profile:
    hw = cfg.hw
    return Profile(str(hw.name), Platform(hw.platform), int(hw.num_gpus), int(hw.nodes),
                   tuple(str(p) for p in hw.detect), cfg.model.family,
                   int(hw.dp_rpc_port), int(hw.master_port))
