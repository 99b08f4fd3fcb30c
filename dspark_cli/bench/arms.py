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

from dataclasses import dataclass, replace
from pathlib import Path

from dspark_cli.bench.protocol import Cell, Protocol, check_max_num_seqs
from dspark_cli.config.bench import BenchPrimary
from dspark_cli.config.choices import DraftTokensRule
from dspark_cli.config.schema import SpeculativeConf
from dspark_cli.config.typed import with_group
from dspark_cli.errors import UsageError
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.rules import checked_plan
from dspark_cli.paths import conf_dir
from dspark_cli.server.logscan import DraftParams, draft_params_spec
from dspark_cli.server.metrics import expected_of


@dataclass(frozen=True)
class Arm:
    name: str  # the launch's name (`protocol.variant`): the arm, or `<arm>+pc-off`
    cfg: BenchPrimary
    plan: LaunchPlan
    # What its verify steps must show (server/metrics.py), and the DSpark draft's pinned
    # parameter count; its launch is `dspark serve`'s, nothing added.
    expected_steps: str | None
    draft_params: DraftParams | None


def arm_config(cfg: BenchPrimary, arm: str) -> BenchPrimary:
    """`cfg` with `speculative` replaced by the arm's profile (schema-checked)."""
    directory = conf_dir() / "speculative"
    path = directory / f"{arm}.yaml"
    extra = cfg.bench.profiles
    if not path.is_file() and extra:  # a proposal's profile (bench/proposal.py)
        path = Path(extra) / "speculative" / f"{arm}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in directory.glob("*.yaml")))
        raise UsageError(
            f"bench.arms names {arm!r}, which is not a speculative profile.",
            hint=f"Arms are files of conf/speculative/ ({known}) or of "
            "<bench.profiles>/speculative/.",
        )
    return with_group(cfg, "speculative", SpeculativeConf, path)


def variant_config(cfg: BenchPrimary, cell: Cell) -> BenchPrimary:
    """The arm's config for `cell`: prefix caching off is the one override a variant adds; on
    is the launch as configured, which must not have it off (the cells would not differ)."""
    arm_cfg = arm_config(cfg, cell.arm)
    if not cell.prefix_caching:
        args = replace(arm_cfg.serving.args, enable_prefix_caching=False)
        return replace(arm_cfg, serving=replace(arm_cfg.serving, args=args))
    if arm_cfg.serving.args.enable_prefix_caching is False:
        raise UsageError(
            "bench.prefix_caching lists on, but serving.args.enable_prefix_caching=false: the "
            "cells marked on would run without it.",
            hint="Set bench.prefix_caching=[off], or drop the serving.args override.")
    return arm_cfg


def compose_arms(cfg: BenchPrimary, protocol: Protocol) -> dict[str, Arm]:
    """Plan every launch a selected cell uses (an arm, or an arm with prefix caching off), its
    node layout checked, and enforce `max_num_seqs >= concurrency` for every cell before
    anything boots."""
    arms: dict[str, Arm] = {}
    for cell in protocol.cells:
        if cell.variant not in arms:
            arm_cfg = variant_config(cfg, cell)
            plan = checked_plan(arm_cfg)  # a bad layout is refused before anything runs
            expected = expected_of(plan.arg("speculative_config"),
                                   arm_cfg.speculative.draft_tokens_rule == DraftTokensRule.exact)
            arms[cell.variant] = Arm(cell.variant, arm_cfg, plan, expected,
                                     draft_params_spec(arm_cfg))
        check_max_num_seqs(arms[cell.variant].plan.arg("max_num_seqs"), cell)
    return arms
