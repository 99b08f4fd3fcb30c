"""`deploy=local` for more than one node: every node of the layout runs on this host as its own
process group, the head's address 127.0.0.1, through the one server session (`server/session.py`)
that serve, smoke and bench share. One node is today's launch, untouched."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omegaconf import DictConfig

from dspark_cli.errors import CheckFailed, UsageError
from dspark_cli.launch.layout import NodeLayout
from dspark_cli.launch.layout_render import layout_script
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.prepare import Prepared
from dspark_cli.run_files import NODES_SH
from dspark_cli.server.target import NodeProcess, Target
from dspark_cli.status import Finding

LOCAL_HEAD = "127.0.0.1"


def refuse_custom_command(cfg: DictConfig, layout: NodeLayout) -> None:
    """server.command replaces one argv; a layout runs one per node."""
    if layout.nodes > 1 and cfg.server.command is not None:
        raise UsageError(f"server.command replaces one command, but hw.nodes={layout.nodes} "
                         "runs one per node; drop server.command or set hw.nodes=1.")


def vllm_accepts_nodes(layout: NodeLayout) -> tuple[Finding, ...]:
    """vLLM's own verdict on every node's command (the head at 127.0.0.1)."""
    from dspark_cli.launch.vllm_verdict import layout_verdict

    return layout_verdict(layout, LOCAL_HEAD)


def require_accepted(findings: tuple[Finding, ...]) -> None:
    from dspark_cli.launch.checks import print_findings

    print_findings(findings)
    if any(f.failed for f in findings):
        raise CheckFailed("a node's command did not pass vLLM's own validation; nothing was "
                          "started.")


def node_target(prepared: Prepared, plan: LaunchPlan, layout: NodeLayout, server: DictConfig,
                log_path: Path, **watch: object) -> Target:
    """The session's target: the head's command as `argv`, the other nodes beside it; one
    node: the prepared launch as it is."""
    target = prepared.target(plan, server, log_path, **watch)  # type: ignore[arg-type]
    if layout.nodes == 1:
        return target
    from dspark_cli.vllm.shim import vllm_command

    def argv(rank: int) -> tuple[str, ...]:
        return tuple(vllm_command(layout.launches[rank].resolved(LOCAL_HEAD)))

    nodes = tuple(NodeProcess(n.rank, argv(n.rank), {**prepared.env, **n.env},
                              n.api_port if n.serves_api else None)
                  for n in layout.launches[1:])
    return dataclasses.replace(target, argv=argv(0), nodes=nodes)


def write_script(layout: NodeLayout, directory: Path) -> None:
    """Every node's env and command in the run record (secrets by variable, as launch.sh)."""
    if layout.nodes > 1:
        (directory / NODES_SH).write_text(layout_script(layout))
