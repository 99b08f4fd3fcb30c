"""vLLM's own verdict on what a plan runs (`vllm/accepts.py` asks vLLM in a subprocess): the
plan's command, or every node's command with the head's address resolved."""

from __future__ import annotations

from collections.abc import Sequence

from dspark_cli.launch.layout import NodeLayout
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.status import Finding
from dspark_cli.vllm.accepts import Verdicts, vllm_accepts_command, vllm_accepts_commands

LOCAL_HEAD = "127.0.0.1"  # where a layout's head is when nothing else says


def plan_verdict(plan: LaunchPlan, timeout_s: float, asked: Verdicts | None = None) -> Finding:
    """A finding: vLLM accepts the command, or why not (not installed, rejected, no answer
    within `timeout_s`); `asked`: the command's answers so far."""
    return vllm_accepts_command(plan.argv, plan.env_map, timeout_s=timeout_s, asked=asked)


def layout_verdict(layout: NodeLayout, timeout_s: float, head_addr: str = LOCAL_HEAD,
                   asked: Verdicts | None = None) -> tuple[Finding, ...]:
    """vLLM's verdict on every node's command, the head's address placeholder resolved; one
    subprocess when the nodes share their environment (they do when planned from one config)."""
    labels = [f"node {node.rank}: " for node in layout.launches]
    argvs = [node.resolved(head_addr) for node in layout.launches]
    envs = [dict(node.env) for node in layout.launches]
    if all(e == envs[0] for e in envs):
        return vllm_accepts_commands(argvs, envs[0], labels, timeout_s, asked)
    return tuple(vllm_accepts_command(a, e, label, timeout_s, asked)
                 for a, e, label in zip(argvs, envs, labels, strict=True))


def _commands(plan: LaunchPlan) -> list[tuple[list[str], dict[str, str]]]:
    """What `node_verdicts` asks about: every node's command and env (one node: the plan's)."""
    if plan.layout.nodes > 1:
        return [(node.resolved(LOCAL_HEAD), dict(node.env)) for node in plan.layout.launches]
    return [(list(plan.argv), dict(plan.env_map))]


def ask_together(plans: Sequence[LaunchPlan], asked: Verdicts) -> None:
    """Have vLLM asked about every plan's commands with the first of them that `node_verdicts`
    asks about with `asked`, in one vLLM import per environment (a bench's arms); the
    `node_verdicts` that follow find their answers in `asked`."""
    for plan in plans:
        for argv, env in _commands(plan):
            asked.take_along([argv], env)


def node_verdicts(plan: LaunchPlan, timeout_s: float,
                  asked: Verdicts | None = None) -> tuple[Finding, ...]:
    """vLLM's verdict on every node's command (one node: the plan's); `asked`: the command's
    answers so far (None: ask afresh)."""
    return (layout_verdict(plan.layout, timeout_s, LOCAL_HEAD, asked) if plan.layout.nodes > 1
            else (plan_verdict(plan, timeout_s, asked),))
