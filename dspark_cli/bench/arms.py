"""Each arm's launch: the composed config with its `speculative` group set to the arm's
profile, planned by the same `build_plan` as `dspark serve`.

The arm's profile (`conf/speculative/<arm>.yaml`) goes through the group's schema, exactly as
`speculative=<arm>` would compose it, so what a cell benchmarks is what `dspark serve
speculative=<arm>` (with the same other overrides) launches. Overrides of keys inside
`speculative` do not carry over to the arms: an arm is its profile. A cell with prefix caching
off (`bench.prefix_caching`) launches what `dspark serve speculative=<arm>
serving.args.enable_prefix_caching=false` does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from dspark_cli.bench.protocol import Cell, Protocol, check_max_num_seqs
from dspark_cli.config.choices import DraftTokensRule
from dspark_cli.config.schema import SpeculativeConf
from dspark_cli.errors import UsageError
from dspark_cli.launch.layout_rules import checked_layout
from dspark_cli.launch.plan import LaunchPlan, build_plan
from dspark_cli.paths import conf_dir
from dspark_cli.server.draft_params import DraftParams, draft_params_spec
from dspark_cli.server.spec_metrics import expected_of


@dataclass(frozen=True)
class Arm:
    name: str  # the launch's name (`protocol.variant`): the arm, or `<arm>+pc-off`
    cfg: DictConfig
    plan: LaunchPlan
    # What its verify steps must show (server/spec_metrics.py), and the DSpark draft's pinned
    # parameter count; its launch is `dspark serve`'s, nothing added.
    expected_steps: str | None
    draft_params: DraftParams | None


def arm_config(cfg: DictConfig, arm: str) -> DictConfig:
    """`cfg` with `speculative` replaced by the arm's profile (schema-checked)."""
    from omegaconf.errors import OmegaConfBaseException

    directory = conf_dir() / "speculative"
    path = directory / f"{arm}.yaml"
    extra = (cfg.get("bench") or {}).get("profiles")
    if not path.is_file() and extra:  # a proposal's profile (bench/proposal.py)
        path = Path(str(extra)) / "speculative" / f"{arm}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in directory.glob("*.yaml")))
        raise UsageError(
            f"bench.arms names {arm!r}, which is not a speculative profile.",
            hint=f"Arms are files of conf/speculative/ ({known}) or of "
            "<bench.profiles>/speculative/.",
        )
    out = copy.deepcopy(cfg)
    try:
        out.speculative = OmegaConf.merge(OmegaConf.structured(SpeculativeConf),
                                          OmegaConf.load(path))  # fmt: skip
    except OmegaConfBaseException as exc:
        raise UsageError(f"speculative profile {path} does not fit its schema: {exc}") from None
    return out


def variant_config(cfg: DictConfig, cell: Cell) -> DictConfig:
    """The arm's config for `cell`: prefix caching off is the one override a variant adds; on
    is the launch as configured, which must not have it off (the cells would not differ)."""
    arm_cfg = arm_config(cfg, cell.arm)
    if not cell.prefix_caching:
        arm_cfg.serving.args.enable_prefix_caching = False
    elif arm_cfg.serving.args.get("enable_prefix_caching") is False:
        raise UsageError(
            "bench.prefix_caching lists on, but serving.args.enable_prefix_caching=false: the "
            "cells marked on would run without it.",
            hint="Set bench.prefix_caching=[off], or drop the serving.args override.")
    return arm_cfg


def compose_arms(cfg: DictConfig, protocol: Protocol) -> dict[str, Arm]:
    """Plan every launch a selected cell uses (an arm, or an arm with prefix caching off), its
    node layout checked, and enforce `max_num_seqs >= concurrency` for every cell before
    anything boots."""
    arms: dict[str, Arm] = {}
    for cell in protocol.cells:
        if cell.variant not in arms:
            arm_cfg = variant_config(cfg, cell)
            plan = build_plan(arm_cfg)
            checked_layout(plan)  # a bad layout is refused before anything runs
            expected = expected_of(plan.arg("speculative_config"),
                                   arm_cfg.speculative.draft_tokens_rule == DraftTokensRule.exact)
            arms[cell.variant] = Arm(cell.variant, arm_cfg, plan, expected,
                                     draft_params_spec(arm_cfg))
        check_max_num_seqs(arms[cell.variant].plan.arg("max_num_seqs"), cell)
    return arms
