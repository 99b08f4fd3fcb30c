"""The node layout (launch/layout.py): one `vllm serve` per node in each of vLLM's multi-node
modes, computed from the composed config alone; one node is the plan's argv, byte for byte."""

from __future__ import annotations

import pytest

from dspark_cli.errors import UsageError
from dspark_cli.launch.layout import HEAD_ADDR, NodeLayout
from dspark_cli.launch.plan import build_plan
from tests.conftest import compose_typed

PROFILES = ("mi350x", "mi355x", "mi300x", "h200", "b200", "cpu")


def layout(*overrides: str) -> NodeLayout:
    cfg = compose_typed(list(overrides))
    return build_plan(cfg).layout


def opts(argv: tuple[str, ...]) -> dict[str, str | None]:
    """argv's options as flag -> value (None for a switch)."""
    found: dict[str, str | None] = {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else "--"
            found[a] = None if nxt.startswith("--") else nxt
    return found


@pytest.mark.parametrize("profile", PROFILES)
def test_one_node_is_the_plans_argv_byte_for_byte(profile: str) -> None:
    cfg = compose_typed([f"+hw={profile}"])
    plan = build_plan(cfg)
    lay = plan.layout
    assert lay.mode == "single" and lay.nodes == 1 and len(lay.launches) == 1
    assert lay.head.argv == plan.argv
    assert dict(lay.head.env) == plan.env_map
    assert lay.head.serves_api and lay.head.api_port == plan.port
    assert lay.head.resolved("10.1.1.1") == plan.argv


@pytest.mark.parametrize("nodes", [2, 3, 4])
@pytest.mark.parametrize("local_dp", [1, 2])
def test_dp_one_api_server_on_the_head_the_rest_headless(nodes: int, local_dp: int) -> None:
    lay = layout("+hw=mi350x", f"hw.nodes={nodes}", f"hw.args.data_parallel_size={local_dp}",
                 "hw.args.tensor_parallel_size=4", "hw.dp_rpc_port=13345")
    assert lay.mode == "dp" and lay.nodes == nodes and lay.local_dp == local_dp
    assert [n.rank for n in lay.launches] == list(range(nodes))
    for node in lay.launches:
        o = opts(node.argv)
        assert o["--data-parallel-size"] == str(nodes * local_dp)
        assert o["--data-parallel-size-local"] == str(local_dp)
        assert o["--data-parallel-address"] == HEAD_ADDR
        assert o["--data-parallel-rpc-port"] == "13345"
        assert o["--tensor-parallel-size"] == "4"
        assert "--data-parallel-hybrid-lb" not in o and "--nnodes" not in o
        if node.rank == 0:
            assert node.serves_api and node.api_port == 8000
            assert "--headless" not in o and "--data-parallel-start-rank" not in o
        else:
            assert not node.serves_api and node.api_port is None and node.headless
            assert o["--data-parallel-start-rank"] == str(node.rank * local_dp)
    assert lay.head is lay.launches[0]


def test_dp_nodes_share_everything_but_the_rank_flags() -> None:
    """Node 1's argv is the head's plus `--data-parallel-start-rank 1 --headless`."""
    lay = layout("+hw=cpu", "hw.nodes=2")
    head, other = lay.launches
    i = other.argv.index("--data-parallel-start-rank")
    assert other.argv[i:i + 3] == ("--data-parallel-start-rank", "1", "--headless")
    assert other.argv[:i] + other.argv[i + 3:] == head.argv
    plan = build_plan(compose_typed(["+hw=cpu"]))
    assert head.argv[:3] == ("vllm", "serve", plan.model_path)
    assert dict(head.env) == dict(other.env) == plan.env_map
    assert dict(head.env)["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_dp_hybrid_every_node_serves_on_its_own_port() -> None:
    lay = layout("+hw=mi350x", "hw.nodes=3", "hw.layout=dp_hybrid",
                 "hw.args.data_parallel_size=2", "hw.args.tensor_parallel_size=4",
                 "server.port=9000")
    assert lay.mode == "dp_hybrid"
    for node in lay.launches:
        o = opts(node.argv)
        assert node.serves_api and not node.headless and "--headless" not in o
        assert node.api_port == 9000 + node.rank and o["--port"] == str(9000 + node.rank)
        assert "--data-parallel-hybrid-lb" in o
        assert o["--data-parallel-start-rank"] == str(2 * node.rank)
        assert o["--data-parallel-size"] == "6"


@pytest.mark.parametrize("mode", ["dp", "dp_hybrid", "tp"])
def test_the_api_server_count_goes_to_the_nodes_that_serve_the_api(mode: str) -> None:
    """vLLM refuses `--api-server-count` beside `--headless`: a headless node never gets it."""
    lay = layout("+hw=cpu", "hw.nodes=3", f"hw.layout={mode}",
                 "+serving.extra_args.api_server_count=1")
    counts = {node.rank: opts(node.argv).get("--api-server-count") for node in lay.launches}
    served = {node.rank: "1" if node.serves_api else None for node in lay.launches}
    assert counts == served and counts[0] == "1"
    assert all(("--headless" in node.argv) != node.serves_api for node in lay.launches)


def test_tp_across_nodes_master_and_node_ranks() -> None:
    lay = layout("+hw=mi350x", "hw.nodes=2", "hw.layout=tp", "hw.args.tensor_parallel_size=16",
                 "hw.head_address=10.0.0.7", "hw.master_port=29999")
    assert lay.mode == "tp" and lay.head_address == "10.0.0.7" and not lay.uses_placeholder
    for node in lay.launches:
        o = opts(node.argv)
        assert o["--tensor-parallel-size"] == "16" and o["--data-parallel-size"] == "1"
        assert o["--nnodes"] == "2" and o["--node-rank"] == str(node.rank)
        assert o["--master-addr"] == "10.0.0.7" and o["--master-port"] == "29999"
        assert not any(k.startswith("--data-parallel-address") for k in o)
        assert node.headless == (node.rank > 0) and node.serves_api == (node.rank == 0)


def test_head_address_placeholder_resolves_per_node() -> None:
    lay = layout("+hw=cpu", "hw.nodes=2")
    assert lay.uses_placeholder and lay.head_address is None
    for node in lay.launches:
        resolved = node.resolved("192.168.7.1")
        assert HEAD_ADDR not in " ".join(resolved)
        assert opts(resolved)["--data-parallel-address"] == "192.168.7.1"
        assert len(resolved) == len(node.argv)


def test_single_node_plan_flags_keep_their_order_and_values() -> None:
    """Every option of the single-node plan appears on every node with its value (sizes aside)."""
    cfg = compose_typed(["+hw=mi350x"])
    single = opts(build_plan(cfg).argv)
    for node in layout("+hw=mi350x", "hw.nodes=2").launches:
        o = opts(node.argv)
        for flag, value in single.items():
            if flag != "--data-parallel-size":
                assert o[flag] == value, flag
        kept = [f for f in o if f in single]
        assert kept == list(single)


def test_layout_to_dict_round_trips_what_deploy_targets_need() -> None:
    doc = layout("+hw=cpu", "hw.nodes=2").to_dict()
    assert doc["mode"] == "dp" and doc["nodes"] == 2 and doc["head_address"] is None
    assert [n["rank"] for n in doc["launches"]] == [0, 1]
    assert doc["launches"][1]["api_port"] is None and "--headless" in doc["launches"][1]["argv"]


@pytest.mark.parametrize("nodes", [0, -2])
def test_fewer_than_one_node_is_a_usage_error(nodes: int) -> None:
    with pytest.raises(UsageError, match=r"hw\.nodes"):
        layout("+hw=cpu", f"hw.nodes={nodes}")


@pytest.mark.parametrize("flag", ["nnodes=2", "data_parallel_rpc_port=1234",
                                  "data_parallel_address=10.0.0.1", "master_addr=h"])
def test_layout_flags_set_in_config_are_refused_naming_the_key(flag: str) -> None:
    dest = flag.partition("=")[0]
    with pytest.raises(UsageError, match=rf"serving\.extra_args\.{dest}"):
        layout("+hw=cpu", "hw.nodes=2", f"+serving.extra_args.{flag}")


def test_layout_flags_in_config_stay_allowed_for_one_node() -> None:
    lay = layout("+hw=cpu", "+serving.extra_args.data_parallel_rpc_port=1234")
    assert opts(lay.head.argv)["--data-parallel-rpc-port"] == "1234"
