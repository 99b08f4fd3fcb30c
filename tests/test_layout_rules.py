"""Layout preflight rules: every bad layout is refused before anything boots, exit 2, naming the
key to change; good layouts of each mode pass every rule."""

from __future__ import annotations

import dataclasses

import pytest

from dspark_cli.errors import ExitCode, UsageError
from dspark_cli.launch.layout import NodeLayout
from dspark_cli.launch.plan import build_plan
from dspark_cli.launch.rules import (
    LAYOUT_RULES,
    checked_layout,
    layout_findings,
)
from dspark_cli.status import Status
from tests.conftest import compose_typed, run_dspark

GOOD = {
    "dp cpu": ["+hw=cpu", "hw.nodes=2"],
    "dp mi350x": ["+hw=mi350x", "hw.nodes=2"],
    "dp 4 nodes, local DP 2": ["+hw=h200", "hw.nodes=4", "hw.args.data_parallel_size=2",
                               "hw.args.tensor_parallel_size=4"],
    "dp_hybrid": ["+hw=mi350x", "hw.nodes=2", "hw.layout=dp_hybrid",
                  "hw.args.data_parallel_size=2", "hw.args.tensor_parallel_size=4"],
    "tp": ["+hw=mi350x", "hw.nodes=2", "hw.layout=tp", "hw.args.tensor_parallel_size=16",
           "hw.head_address=node-0.cluster.local"],
}


def findings(overrides: list[str]) -> dict[str, tuple[Status, str, str | None]]:
    cfg = compose_typed(overrides)
    return {f.rule: (f.status, f.message, f.key) for f in layout_findings(build_plan(cfg))}


@pytest.mark.parametrize("name", list(GOOD))
def test_good_layouts_pass_every_rule(name: str) -> None:
    found = findings(GOOD[name])
    assert set(found) == {r.id for r in LAYOUT_RULES}
    assert all(status is Status.passed for status, _, _ in found.values()), found


def test_one_node_has_no_layout_findings() -> None:
    cfg = compose_typed(["+hw=mi350x", "hw.args.pipeline_parallel_size=2"])
    plan = build_plan(cfg)
    assert checked_layout(plan) is plan.layout and layout_findings(plan) == ()


BAD = {
    # rule id: (overrides, key named, words in the message)
    "layout-world-divides-nodes": (
        ["+hw=cpu", "hw.nodes=3", "hw.layout=tp", "hw.args.tensor_parallel_size=2"],
        "hw.args.tensor_parallel_size", "does not divide over 3 nodes"),
    "layout-gpus-per-node": (
        ["+hw=mi350x", "hw.nodes=2", "hw.layout=tp"],
        "hw.args.tensor_parallel_size", "puts 4 GPUs on each node"),
    "layout-hybrid-local-dp": (
        ["+hw=cpu", "hw.nodes=2", "hw.layout=dp_hybrid"],
        "hw.args.data_parallel_size", "external load balancing"),
    "layout-head-address": (
        ["+hw=cpu", "hw.nodes=2", "hw.head_address='bad host;rm -rf'"],
        "hw.head_address", "neither an IP address nor a host name"),
    "layout-adaptive-every-node": (
        ["+hw=mi350x", "hw.nodes=2", "hw.args.tensor_parallel_size=4",
         "hw.args.pipeline_parallel_size=2"],
        "hw.args.pipeline_parallel_size", "node 1 runs pipeline parallelism"),
    "layout-tp-needs-mp": (
        ["+hw=cpu", "hw.nodes=2", "hw.layout=tp", "hw.args.tensor_parallel_size=2",
         "+serving.extra_args.data_parallel_backend=ray"],
        "serving.extra_args.data_parallel_backend", "--data-parallel-backend mp"),
}


@pytest.mark.parametrize("rule", list(BAD))
def test_each_bad_layout_fails_its_rule_naming_the_key(rule: str) -> None:
    overrides, key, words = BAD[rule]
    status, message, named = findings(overrides)[rule]
    assert status is Status.failed, message
    assert named == key and words in message
    cfg = compose_typed(overrides)
    with pytest.raises(UsageError) as err:
        checked_layout(build_plan(cfg))
    assert f"change `{key}`" in err.value.message and rule in err.value.message
    assert err.value.exit_code is ExitCode.USAGE


@pytest.mark.parametrize(("overrides", "key", "words"), [
    (["hw.dp_rpc_port=0"], "hw.dp_rpc_port", "outside 1..65535"),
    (["hw.dp_rpc_port=70000"], "hw.dp_rpc_port", "outside 1..65535"),
    (["hw.dp_rpc_port=8000"], "server.port", "both 8000"),
    (["hw.layout=dp_hybrid", "hw.args.data_parallel_size=2", "hw.dp_rpc_port=9001",
      "server.port=9000"], "server.port", "both 9001"),
    (["hw.layout=tp", "hw.master_port=8000"], "server.port", "both 8000"),
    (["hw.layout=tp", "hw.master_port=-1"], "hw.master_port", "outside 1..65535"),
])
def test_ports_out_of_range_or_shared_are_refused(overrides: list[str], key: str,
                                                  words: str) -> None:
    status, message, named = findings(["+hw=cpu", "hw.nodes=2", *overrides])["layout-ports"]
    assert status is Status.failed and named == key and words in message, message


def test_a_hand_made_layout_whose_sizes_do_not_multiply_is_refused() -> None:
    """What a deploy target gets must number its ranks: a layout whose start ranks collide
    (or whose DP size is not nodes x local DP) breaks `layout-sizes-multiply`."""
    cfg = compose_typed(["+hw=cpu", "hw.nodes=2"])
    plan = build_plan(cfg)
    lay = plan.layout
    head, other = lay.launches
    same_rank = dataclasses.replace(other, args=tuple(
        (d, 0 if d == "data_parallel_start_rank" else v) for d, v in other.args))
    bad = NodeLayout(lay.mode, 2, lay.gpus_per_node, (head, same_rank), None, 1)
    found = {f.rule: f for f in layout_findings(plan, bad)}
    assert found["layout-sizes-multiply"].failed
    assert "start ranks [0, 0]" in found["layout-sizes-multiply"].message
    wrong_size = dataclasses.replace(bad, local_dp=2)
    assert "nodes x local DP = 4" in {f.rule: f for f in layout_findings(
        plan, wrong_size)}["layout-sizes-multiply"].message


def test_hybrid_with_one_rank_per_node_is_kept_for_moe_models() -> None:
    """vLLM turns it into external load balancing, which MoE models (DeepSeek-V4) accept."""
    status, _, _ = findings(["+hw=mi350x", "hw.nodes=2", "hw.layout=dp_hybrid"])[
        "layout-hybrid-local-dp"]
    assert status is Status.passed


def test_headless_heads_and_headless_hybrid_nodes_are_refused() -> None:
    """`--headless` is the layout's alone (config cannot set it); a layout built elsewhere (a
    deploy target's) that serves no API, or runs hybrid load balancing headless, is refused."""
    cfg = compose_typed(["+hw=mi350x", "hw.nodes=2", "hw.layout=dp_hybrid",
                          "hw.args.data_parallel_size=2", "hw.args.tensor_parallel_size=4"])
    plan = build_plan(cfg)
    lay = plan.layout

    def headless(node):
        return dataclasses.replace(node, serves_api=False, api_port=None,
                                   args=(*node.args, ("headless", True)))

    hybrid = dataclasses.replace(lay, launches=(lay.head, headless(lay.launches[1])))
    found = {f.rule: f for f in layout_findings(plan, hybrid)}
    assert found["layout-hybrid-not-headless"].failed
    assert found["layout-hybrid-not-headless"].message.startswith("nodes [1] run")
    assert found["layout-hybrid-not-headless"].key == "hw.layout"
    no_api = dataclasses.replace(lay, launches=(headless(lay.head), lay.launches[1]))
    found = {f.rule: f for f in layout_findings(plan, no_api)}
    assert found["layout-head-serves-api"].failed and "no node would serve" in found[
        "layout-head-serves-api"].message


def test_headless_from_config_is_refused_naming_hw_nodes() -> None:
    with pytest.raises(UsageError, match=r"hw\.nodes"):
        build_plan(compose_typed(["+hw=cpu", "hw.nodes=2", "+serving.extra_args.headless=true"]))


def test_tp_node_ranks_must_number_the_nodes() -> None:
    cfg = compose_typed(["+hw=cpu", "hw.nodes=2", "hw.layout=tp",
                          "hw.args.tensor_parallel_size=2"])
    plan = build_plan(cfg)
    lay = plan.layout
    twice = dataclasses.replace(lay, launches=(lay.head, lay.head))
    found = {f.rule: f for f in layout_findings(plan, twice)}
    assert found["layout-sizes-multiply"].failed and "[0, 0]" in found[
        "layout-sizes-multiply"].message


def test_a_bad_layout_exits_2_from_the_cli_naming_the_key_and_writes_nothing(tmp_path) -> None:
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "hw.layout=tp", "--dry-run",
                      cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "layout-gpus-per-node" in done.stderr and "hw.args.tensor_parallel_size" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "runs").exists()


def test_zero_nodes_exits_2_from_the_cli(tmp_path) -> None:
    done = run_dspark("serve", "+hw=cpu", "hw.nodes=0", "--dry-run", cwd=tmp_path)
    assert done.returncode == 2 and "hw.nodes=0" in done.stderr, done.stderr


def test_bench_refuses_a_bad_layout_before_anything_runs(tmp_path) -> None:
    done = run_dspark("bench", "bench=cpu", "+hw=mi350x", "hw.nodes=2", "hw.layout=tp",
                      "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "layout-gpus-per-node" in done.stderr and "hw.args.tensor_parallel_size" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()


def test_bench_plans_several_nodes(tmp_path) -> None:
    done = run_dspark("bench", "bench=cpu", "+hw=cpu", "hw.nodes=2", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()


def _fits(overrides: list[str]):  # type: ignore[no-untyped-def]
    from dspark_cli.launch.rules import Context, run_rules

    cfg = compose_typed(overrides)
    return {f.rule: f for f in run_rules(Context(build_plan(cfg), None))}[
        "parallel-fits-profile"]


@pytest.mark.parametrize(("overrides", "fits"), [
    # TP across nodes: world = TP = nodes x GPUs per node
    (["+hw=mi350x", "hw.nodes=2", "hw.layout=tp", "hw.args.tensor_parallel_size=16"], True),
    (["+hw=mi350x", "hw.nodes=4", "hw.layout=tp", "hw.args.tensor_parallel_size=32"], True),
    (["+hw=mi350x", "hw.nodes=2", "hw.layout=tp", "hw.args.tensor_parallel_size=32"], False),
    # DP across nodes: world = TP x local DP x nodes
    (["+hw=mi350x", "hw.nodes=2"], True),
    (["+hw=mi350x", "hw.nodes=2", "hw.args.data_parallel_size=2"], False),
    (["+hw=mi350x"], True),
    (["+hw=mi350x", "hw.args.tensor_parallel_size=16"], False),
])
def test_parallel_fits_profile_counts_the_world_across_nodes(overrides, fits) -> None:
    found = _fits(overrides)
    assert (found.status is Status.passed) is fits, found.message
    if not fits:
        assert found.key == "hw.args.tensor_parallel_size"
        assert "needs more GPUs than" in found.message


def test_tp_16_on_two_8_gpu_nodes_passes_the_dry_run() -> None:
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "hw.layout=tp",
                      "hw.args.tensor_parallel_size=16", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "FAILED" not in done.stderr and done.stdout.count("--tensor-parallel-size 16") == 2


def test_nodes_run_here_share_this_machines_gpus() -> None:
    """deploy=local runs every node on this host: the world across nodes must fit its GPUs."""
    from dspark_cli.config.choices import Platform
    from dspark_cli.launch.rules import Context, run_rules
    from dspark_cli.machine.detect import Gpu, Machine

    h200x8 = Machine(Platform.cuda, tuple(Gpu(i, "NVIDIA H200", "sm_90") for i in range(8)))

    def fits(overrides: list[str]) -> Status:
        cfg = compose_typed(overrides)
        found = {f.rule: f for f in run_rules(Context(build_plan(cfg), h200x8))}
        return found["parallel-fits-machine"].status

    assert fits(["+hw=h200"]) is Status.passed
    assert fits(["+hw=h200", "hw.nodes=2"]) is Status.failed  # 2 x 8 GPUs on one 8-GPU host
    assert fits(["+hw=h200", "hw.nodes=2", "hw.layout=tp",
                 "hw.args.tensor_parallel_size=16"]) is Status.failed
