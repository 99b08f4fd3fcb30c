"""A launch plan spread over `hw.nodes` nodes: one `vllm serve` per node, in vLLM's own modes.

Pure: the hw group and the plan's one command in, a `NodeLayout` out (the plan holds it).
Where each node's command runs (local process groups, a Slurm job, Kubernetes pods) is a
deploy target's business; the layout says only what
runs on each node rank. The head's address is a placeholder (`HEAD_ADDR`) unless
`hw.head_address` sets it, because on a cluster only the engine knows it at run time.

- `dp`: data parallel, vLLM's internal load balancing. Every node runs `--data-parallel-size
  nodes x L --data-parallel-size-local L --data-parallel-address HEAD --data-parallel-rpc-port P`
  (L: the profile's per-node `data_parallel_size`); nodes after the head add `--headless
  --data-parallel-start-rank rank x L`. Only the head serves the API, so the plan's
  `--api-server-count` (how many API server processes) goes to the head alone: vLLM refuses it
  beside `--headless`.
- `dp_hybrid`: the same sizes, `--data-parallel-hybrid-lb` and a start rank on every node, no
  `--headless`: each node serves the API, on `server.port + rank` (so nodes may share a host).
- `tp`: one engine across the nodes: `--nnodes N --node-rank R --master-addr HEAD
  --master-port P`, headless after the head. The profile's sizes are the engine's totals
  (`hw.args.tensor_parallel_size=16` on two 8-GPU nodes).

One node gives one launch whose argv is the plan's argv, byte for byte. Every command (the
plan's, each node's) renders its options with the one `render_flag`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dspark_cli.config.choices import Layout
from dspark_cli.errors import UsageError

if TYPE_CHECKING:
    from dspark_cli.config.schema import HardwareConf

HEAD_ADDR = "${DSPARK_HEAD_ADDR}"  # placeholder inside argv/env where the head node's address goes
HEAD_ADDR_VAR = "DSPARK_HEAD_ADDR"

SIZE_DESTS = ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size")
# Options the layout sets on every node of a multi-node plan; setting one in config as well
# would give two answers for one flag.
LAYOUT_DESTS = (
    "data_parallel_size_local", "data_parallel_address", "data_parallel_rpc_port",
    "data_parallel_start_rank", "data_parallel_hybrid_lb", "data_parallel_rank",
    "data_parallel_external_lb", "nnodes", "node_rank", "master_addr", "master_port",
)
VLLM_DEFAULT_PORT = 8000


def render_flag(dest: str, value: Any) -> list[str]:
    """One vLLM option as argv: True -> `--x`, False -> `--no-x`, dict -> compact JSON,
    list -> `--x a b`; None is not rendered."""
    flag = "--" + dest.replace("_", "-")
    if value is None:
        return []
    if isinstance(value, bool):
        return [flag] if value else ["--no-" + dest.replace("_", "-")]
    if isinstance(value, dict):
        return [flag, json.dumps(value, separators=(",", ":"))]
    if isinstance(value, list | tuple):
        return [flag, *(str(v) for v in value)]
    return [flag, str(value)]


@dataclass(frozen=True)
class NodeLaunch:
    rank: int  # node rank; 0 is the head
    serves_api: bool  # runs the OpenAI API server (the head; every node in hybrid LB)
    argv: tuple[str, ...]  # the whole `vllm serve ...` argv of this node; may contain HEAD_ADDR
    env: Mapping[str, str]  # this node's environment additions (secrets handled as for one node)
    api_port: int | None  # the API port when serves_api
    # This node's vLLM options by argparse dest, as rendered (rules read these, never the argv).
    args: tuple[tuple[str, Any], ...] = ()

    def resolved(self, head_addr: str) -> tuple[str, ...]:
        """The argv with HEAD_ADDR replaced by the head's real address."""
        return tuple(a.replace(HEAD_ADDR, head_addr) for a in self.argv)

    def arg(self, dest: str, default: Any = None) -> Any:
        return dict(self.args).get(dest, default)

    @property
    def headless(self) -> bool:
        return bool(self.arg("headless"))

    @property
    def world_size(self) -> int:
        """TP x DP x PP of this node's command: the whole deployment's GPUs as vLLM counts them
        (DP is the total across nodes; TP too, across nodes with --nnodes)."""
        return math.prod(int(self.arg(d) or 1) for d in SIZE_DESTS)

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "serves_api": self.serves_api, "argv": list(self.argv),
                "env": dict(self.env), "api_port": self.api_port}


@dataclass(frozen=True)
class NodeLayout:
    mode: str  # "single" | "dp" | "dp_hybrid" | "tp"
    nodes: int
    gpus_per_node: int
    launches: tuple[NodeLaunch, ...]  # one per node rank, rank order
    head_address: str | None = None  # hw.head_address; None: HEAD_ADDR until run time
    local_dp: int = 1  # data parallel ranks per node (the dp layouts)

    @property
    def head(self) -> NodeLaunch:
        return self.launches[0]

    @property
    def engines(self) -> int:
        """Data parallel engines behind the API (vLLM's DP size as the head renders it)."""
        return int(self.head.arg("data_parallel_size") or 1)

    @property
    def uses_placeholder(self) -> bool:
        return any(HEAD_ADDR in a for launch in self.launches for a in launch.argv)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "nodes": self.nodes, "gpus_per_node": self.gpus_per_node,
                "head_address": self.head_address,
                "launches": [launch.to_dict() for launch in self.launches]}


def _layout_args(command: NodeLaunch, sizes: dict[str, int], flags: dict[str, Any],
                 port: int | None) -> dict[str, Any]:
    """The command's options with the sizes replaced in place (or added after the planned
    sizes), the layout's flags right after them, and the API port (None: as planned)."""
    planned = dict(command.args)
    if flags.get("headless"):  # no API server there: vLLM refuses a count beside --headless
        planned.pop("api_server_count", None)
    if port is not None:
        planned["port"] = port if port != VLLM_DEFAULT_PORT else None
    added = {d: v for d, v in sizes.items() if d not in planned}
    planned.update({d: v for d, v in sizes.items() if d in planned})
    items = list(planned.items())
    split = 1 + max((i for i, (d, _) in enumerate(items) if d in SIZE_DESTS), default=-1)
    ordered = {**dict(items[:split]), **added, **flags}
    ordered.update(items[split:])
    return {d: v for d, v in ordered.items() if v is not None}


def _launch(command: NodeLaunch, model_path: str, rank: int, serves_api: bool,
            api_port: int | None, args: dict[str, Any]) -> NodeLaunch:
    argv = ["vllm", "serve", model_path]
    for dest, value in args.items():
        argv += render_flag(dest, value)
    return NodeLaunch(rank, serves_api, tuple(argv), command.env,
                      api_port if serves_api else None, tuple(args.items()))


def _refuse_layout_dests(command: NodeLaunch) -> None:
    taken = [d for d in LAYOUT_DESTS if command.arg(d) is not None]
    if taken:
        flags = ", ".join(f"--{d.replace('_', '-')}" for d in taken)
        raise UsageError(
            f"{flags} set in config (`serving.extra_args.{taken[0]}`), but with hw.nodes > 1 "
            "the node layout sets it for each node; remove it and choose the layout with "
            "hw.layout, hw.head_address, hw.dp_rpc_port and hw.master_port.")


def node_layout(hw: HardwareConf, command: NodeLaunch, model_path: str) -> NodeLayout:
    """`command` (the plan's one command) spread over `hw.nodes`, one NodeLaunch per node rank;
    raises UsageError for a node count below one or a layout option also set in config.
    Whether the result is a good layout is for the layout rules."""
    nodes = int(hw.nodes)
    gpus = int(hw.num_gpus)
    if nodes < 1:
        raise UsageError(f"hw.nodes={nodes}: a deployment needs at least one node.")
    if nodes == 1:
        return NodeLayout("single", 1, gpus, (command,))
    _refuse_layout_dests(command)
    mode = Layout(hw.layout).value
    head = str(hw.head_address) if hw.head_address is not None else HEAD_ADDR
    local_dp = int(command.arg("data_parallel_size") or 1)
    launches = []
    for rank in range(nodes):
        if mode == "tp":
            flags: dict[str, Any] = {"nnodes": nodes, "node_rank": rank, "master_addr": head,
                                     "master_port": int(hw.master_port)}
            sizes: dict[str, int] = {}
            serves, port = rank == 0, None
        else:
            flags = {"data_parallel_size_local": local_dp, "data_parallel_address": head,
                     "data_parallel_rpc_port": int(hw.dp_rpc_port)}
            sizes = {"data_parallel_size": nodes * local_dp}
            if mode == "dp_hybrid":
                flags |= {"data_parallel_start_rank": rank * local_dp,
                          "data_parallel_hybrid_lb": True}
                serves, port = True, int(command.api_port or 0) + rank
            else:
                if rank:
                    flags["data_parallel_start_rank"] = rank * local_dp
                serves, port = rank == 0, None
        if not serves:
            flags["headless"] = True
        args = _layout_args(command, sizes, flags, port)
        launches.append(_launch(command, model_path, rank, serves, port or command.api_port,
                                args))
    return NodeLayout(mode, nodes, gpus, tuple(launches),
                      None if hw.head_address is None else str(hw.head_address), local_dp)
