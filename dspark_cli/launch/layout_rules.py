"""Preflight rules for a multi-node layout, judged on the commands each node will run.

They use the rule machinery of `rules.py` (a Rule names the key to change) but read the
rendered `NodeLayout`, so a flag slipped in through a free-form map is judged like any other.
A bad layout is a config error: `checked_layout` reports every failure and raises UsageError
(exit 2) before anything is written or started. One node has no layout to judge.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

from dspark_cli.config.choices import Platform
from dspark_cli.errors import UsageError
from dspark_cli.launch.layout import HEAD_ADDR, NodeLaunch, NodeLayout
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.profile import Profile
from dspark_cli.status import Finding, Status

_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


@dataclass(frozen=True)
class LayoutContext:
    profile: Profile
    layout: NodeLayout


@dataclass(frozen=True)
class LayoutRule:
    id: str
    summary: str
    key: str
    # A problem (or a problem and the key to change, where it depends on the case), or None.
    check: Callable[[LayoutContext], str | tuple[str, str] | None]


def _size(node: NodeLaunch, dest: str) -> int:
    return int(node.arg(dest) or 1)


def _world_divides(c: LayoutContext) -> str | None:
    world, nodes = c.layout.head.world_size, c.layout.nodes
    if world % nodes:
        return (f"TP x DP x PP = {world} does not divide over {nodes} nodes; vLLM refuses "
                f"`--nnodes {nodes}` unless it divides the world size")
    return None


def _sizes_multiply(c: LayoutContext) -> str | None:
    lay = c.layout
    if lay.mode == "tp":
        ranks = [n.arg("node_rank") for n in lay.launches]
        nnodes = {n.arg("nnodes") for n in lay.launches}
        if nnodes != {lay.nodes} or ranks != list(range(lay.nodes)):
            return (f"--nnodes {sorted(map(str, nnodes))} and --node-rank {ranks} do not "
                    f"number {lay.nodes} nodes 0..{lay.nodes - 1}")
        return None
    sizes = {n.arg("data_parallel_size") for n in lay.launches}
    local = {n.arg("data_parallel_size_local") for n in lay.launches}
    want = lay.nodes * lay.local_dp
    if sizes != {want} or local != {lay.local_dp}:
        return (f"DP size {sorted(map(str, sizes))} with local DP {sorted(map(str, local))} "
                f"on {lay.nodes} nodes; it must be nodes x local DP = {want} on every node")
    starts = [n.arg("data_parallel_start_rank") or 0 for n in lay.launches]
    if starts != [r * lay.local_dp for r in range(lay.nodes)]:
        return (f"DP start ranks {starts} do not step by the local DP size {lay.local_dp}; "
                "two nodes would claim the same engine ranks")
    return None


def _gpus_per_node(c: LayoutContext) -> str | None:
    hw = c.profile
    if hw.platform is Platform.cpu:
        return None
    per_node, _ = divmod(c.layout.head.world_size, c.layout.nodes)
    if per_node != hw.num_gpus:
        fix = ("set hw.args.tensor_parallel_size to the engine's total TP "
               f"({hw.num_gpus * c.layout.nodes} for {c.layout.nodes} nodes)"
               if c.layout.mode == "tp" else "make TP x local DP x PP the node's GPU count")
        return (f"{c.layout.mode} over {c.layout.nodes} nodes puts {per_node} GPUs on each "
                f"node, but the {hw.hw_name} profile has {hw.num_gpus} per node; {fix}")
    return None


def _hybrid_not_headless(c: LayoutContext) -> str | None:
    bad = [n.rank for n in c.layout.launches if n.arg("data_parallel_hybrid_lb") and n.headless]
    if bad:
        return (f"nodes {bad} run --data-parallel-hybrid-lb with --headless; in hybrid load "
                "balancing every node serves the API (vLLM refuses the pair)")
    return None


MOE_FAMILIES = ("deepseek_v4",)  # model families known to be mixture-of-experts


def _hybrid_local_dp(c: LayoutContext) -> str | None:
    moe = c.profile.family in MOE_FAMILIES
    if c.layout.mode == "dp_hybrid" and c.layout.local_dp < 2 and not moe:
        return ("hybrid load balancing with one DP rank per node: vLLM switches it to external "
                "load balancing, which only MoE models accept; set hw.args.data_parallel_size "
                "(ranks per node) to 2 or more, or use hw.layout=dp")
    return None


def _head_serves(c: LayoutContext) -> str | None:
    head = c.layout.head
    if head.headless or not head.serves_api:
        return "the head node (rank 0) runs --headless, so no node would serve the API"
    headless = [n.rank for n in c.layout.launches[1:] if n.serves_api == n.headless]
    if headless:
        return f"nodes {headless} neither serve the API nor run --headless"
    return None


def _valid_address(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return bool(_HOSTNAME.match(address))
    return True


def _head_address(c: LayoutContext) -> str | None:
    address = c.layout.head_address
    if address is not None and not _valid_address(address):
        return (f"hw.head_address={address!r} is neither an IP address nor a host name "
                f"(leave it null to take the head's address at run time, {HEAD_ADDR})")
    return None


def _ports(c: LayoutContext) -> tuple[str, str] | None:
    hw, lay = c.profile, c.layout
    own = "hw.master_port" if lay.mode == "tp" else "hw.dp_rpc_port"
    named = {own: (own, hw.master_port if lay.mode == "tp" else hw.dp_rpc_port)}
    named |= {f"the API port of node {n.rank}": ("server.port", int(n.api_port))
              for n in lay.launches if n.api_port is not None}
    for name, (key, port) in named.items():
        if not 0 < port < 65536:
            return f"{name} is {port}, outside 1..65535", key
    seen: dict[int, str] = {}
    for name, (key, port) in named.items():
        if port in seen:
            return (f"{name} and {seen[port]} are both {port}; nodes may share a host, so "
                    "every port must be distinct", key)
        seen[port] = name
    return None


def _adaptive_every_node(c: LayoutContext) -> tuple[str, str] | None:
    """The key named is the one that makes a node break the rule: the PP size, or eager mode."""
    problems, keys = [], []
    for node in c.layout.launches:
        spec = node.arg("speculative_config") or {}
        if not spec.get("enable_adaptive_verification"):
            continue
        if _size(node, "pipeline_parallel_size") > 1:
            problems.append(f"node {node.rank} runs pipeline parallelism")
            keys.append("hw.args.pipeline_parallel_size")
        if node.arg("enforce_eager"):
            problems.append(f"node {node.rank} runs --enforce-eager")
            keys.append("compilation.enforce_eager")
    if problems:
        return ("DSpark adaptive verification excludes pipeline parallelism and eager mode on "
                "every node: " + "; ".join(problems), keys[0])
    return None


def _tp_backend(c: LayoutContext) -> str | None:
    backend = c.layout.head.arg("data_parallel_backend")
    if c.layout.mode == "tp" and backend not in (None, "mp"):
        return f"vLLM runs --nnodes > 1 only with --data-parallel-backend mp, not {backend}"
    return None


LAYOUT_RULES: tuple[LayoutRule, ...] = (
    LayoutRule("layout-world-divides-nodes", "the world size divides over the nodes",
               "hw.args.tensor_parallel_size", _world_divides),
    LayoutRule("layout-sizes-multiply", "DP size = nodes x local DP; ranks number the nodes",
               "hw.nodes", _sizes_multiply),
    LayoutRule("layout-gpus-per-node", "each node gets the profile's GPUs",
               "hw.args.tensor_parallel_size", _gpus_per_node),
    LayoutRule("layout-hybrid-not-headless", "hybrid load balancing is not headless",
               "hw.layout", _hybrid_not_headless),
    LayoutRule("layout-hybrid-local-dp",
               "hybrid load balancing of a dense model needs 2+ DP ranks per node",
               "hw.args.data_parallel_size", _hybrid_local_dp),
    LayoutRule("layout-head-serves-api", "the head serves the API, the others are headless",
               "hw.layout", _head_serves),
    LayoutRule("layout-head-address", "the head's address is an address",
               "hw.head_address", _head_address),
    LayoutRule("layout-ports", "the layout's ports are set and distinct",
               "hw.dp_rpc_port", _ports),
    LayoutRule("layout-adaptive-every-node", "adaptive verification's rules hold on every node",
               "hw.args.pipeline_parallel_size", _adaptive_every_node),
    LayoutRule("layout-tp-needs-mp", "TP across nodes needs the mp DP backend",
               "serving.extra_args.data_parallel_backend", _tp_backend),
)


def layout_findings(plan: LaunchPlan, layout: NodeLayout | None = None) -> tuple[Finding, ...]:
    """Every layout rule's finding on the plan's layout (or `layout`, judged with the plan's
    profile); none for one node."""
    layout = plan.layout if layout is None else layout
    if layout.nodes == 1:
        return ()
    ctx = LayoutContext(plan.profile, layout)
    findings = []
    for rule in LAYOUT_RULES:
        problem, key = rule.check(ctx), rule.key
        if isinstance(problem, tuple):
            problem, key = problem
        findings.append(Finding(rule.id, Status.failed if problem else Status.passed,
                                problem or rule.summary, key))
    return tuple(findings)


def checked_layout(plan: LaunchPlan) -> NodeLayout:
    """The plan's node layout, or UsageError naming the keys of every rule it breaks."""
    layout = plan.layout
    failed = [f for f in layout_findings(plan) if f.failed]
    if failed:
        lines = "; ".join(f"{f.rule}: {f.message} (change `{f.key}`)" for f in failed)
        raise UsageError(f"the {layout.mode} layout over {layout.nodes} nodes is not valid: "
                         f"{lines}. Nothing was started.")
    return layout
