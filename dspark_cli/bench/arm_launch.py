"""An arm made startable where its deploy target runs it: one node here (today's launch),
several nodes here as process groups (`launch/local_nodes.py`), or a deployment a cluster engine
runs (`deploy/cluster_run.py`, a fresh job per cell). The checks, the model and the arm's run
record happen once, before the first boot; each cell then gets its own session target."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_cli.bench.arms import Arm
from dspark_cli.run_files import SERVER_LOG
from dspark_cli.server.target import Target


@dataclass(frozen=True)
class ArmLaunch:
    """What every cell of an arm starts: `target(cell_dir, **watch)` is a fresh session target
    whose files (log, job script) go into the cell's directory; `argv` is the head's command
    for the record; `env` the load generator's environment."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    target: Callable[..., Target]


def arm_launch(arm: Arm, record_dir: Path) -> ArmLaunch:
    """Check and prepare `arm` (CheckFailed/UsageError before anything boots), writing its run
    record into `record_dir`."""
    from dspark_cli.launch import local_nodes
    from dspark_cli.launch.layout_rules import checked_layout
    from dspark_cli.launch.prepare import child_environ, prepare

    cfg, plan = arm.cfg, arm.plan
    layout = checked_layout(cfg, plan)
    if str(cfg.deploy.target) != "local":
        from dspark_cli.deploy import cluster_run
        from dspark_cli.vllm.shim import vllm_command

        cluster_run.prepare(cfg, plan, layout, record_dir)

        def on_cluster(cell_dir: Path, **watch: Any) -> Target:
            return cluster_run.cluster_target(cfg, plan, layout, cell_dir, **watch)

        return ArmLaunch(tuple(vllm_command(plan.argv)), child_environ(), on_cluster)
    local_nodes.refuse_custom_command(cfg, layout)
    several = layout.nodes > 1
    prepared = prepare(cfg, plan, record_dir, ask_vllm=not several)
    if several:
        local_nodes.require_accepted(local_nodes.vllm_accepts_nodes(layout))
        local_nodes.write_script(layout, record_dir)

    def here(cell_dir: Path, **watch: Any) -> Target:
        return local_nodes.node_target(prepared, plan, layout, cfg.server,
                                       cell_dir / SERVER_LOG, **watch)

    return ArmLaunch(here(record_dir).argv or prepared.argv, prepared.env, here)
