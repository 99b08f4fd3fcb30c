"""The protocol plan (pure): cells, phase order and sizes, selection, and config errors."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from dspark_cli.bench.protocol import (
    VLLM_DEFAULT_MAX_NUM_SEQS,
    Protocol,
    build_protocol,
    check_max_num_seqs,
)
from dspark_cli.config import bench as schema
from dspark_cli.config.bench import BenchConf, LosslessConf, SamplingConf, WarmupConf
from dspark_cli.errors import UsageError
from tests.conftest import compose_config, compose_typed

BENCH: dict[str, Any] = {
    "name": "t",
    "arms": ["none", "fixed", "adaptive"],
    "baseline": "fixed",
    "concurrencies": [64, 4],
    "sampling": {"temperature": 1.0, "top_p": 1.0, "max_output_tokens": 2048,
                 "ignore_eos": False},
    "warmups": [{"num_prompts": 64, "concurrency": 32, "output_tokens": 256},
                {"num_prompts": 64, "concurrency": None, "output_tokens": 256}],
    "measured_prompts": 880,
    "arm": None,
    "concurrency": None,
    "phase_timeout_s": 10.0,
    "metrics_timeout_s": 5.0,
}


def bench(**changes: Any) -> BenchConf:
    """The protocol as the command edge hands it on: the schema's dataclasses."""
    conf = {**copy.deepcopy(BENCH), **changes}
    return BenchConf(**{**conf, "sampling": SamplingConf(**conf["sampling"]),
                        "warmups": [WarmupConf(**w) for w in conf["warmups"]],
                        "lossless": LosslessConf(enabled=False)})


def test_cells_run_concurrency_major_in_config_order() -> None:
    p = build_protocol(bench())
    assert [c.id for c in p.cells] == [
        "none-c64", "fixed-c64", "adaptive-c64", "none-c4", "fixed-c4", "adaptive-c4"]


def test_repeats_are_cold_boots_of_their_own_arms_alternating_within_a_concurrency() -> None:
    p = build_protocol(bench(repeats=2, equivalence_margin=0.1))
    assert (p.repeats, p.equivalence_margin) == (2, 0.1)
    assert [c.id for c in p.cells][:6] == [  # A/B, then B/A
        "none-c64-r1", "fixed-c64-r1", "adaptive-c64-r1",
        "adaptive-c64-r2", "fixed-c64-r2", "none-c64-r2"]
    assert len(p.cells) == 12 and len({c.id for c in p.cells}) == 12
    assert p.cell("fixed", 4, 2) is p.cells[10] and p.cells[10].repeat == 2
    assert p.cells[0].phases == p.cells[5].phases
    three = build_protocol(bench(repeats=3, arms=["none", "fixed"], concurrencies=[4]))
    assert [c.id for c in three.cells] == ["none-c4-r1", "fixed-c4-r1", "fixed-c4-r2",
                                           "none-c4-r2", "none-c4-r3", "fixed-c4-r3"]


def test_one_repeat_keeps_the_short_cell_ids_and_the_default_margin() -> None:
    p = build_protocol(bench())
    assert (p.repeats, p.equivalence_margin) == (1, 0.05)
    assert {c.repeat for c in p.cells} == {1}


def test_a_repeat_can_be_selected_like_an_arm_or_a_concurrency() -> None:
    p = build_protocol(bench(repeats=3, repeat=2, concurrency=4))
    assert [c.id for c in p.cells] == ["adaptive-c4-r2", "fixed-c4-r2", "none-c4-r2"]


def test_phases_are_warmups_then_the_measured_phase() -> None:
    cell = build_protocol(bench()).cell("adaptive", 4)
    assert cell is not None
    assert [(p.name, p.num_prompts, p.concurrency, p.output_tokens, p.measured)
            for p in cell.phases] == [
        ("warmup1", 64, 32, 256, False),
        ("warmup2", 64, 4, 256, False),  # null concurrency: the cell's own
        ("measured", 880, 4, 2048, True),
    ]
    assert cell.measured.name == "measured"


def test_no_warmups_leaves_only_the_measured_phase() -> None:
    cell = build_protocol(bench(warmups=[])).cells[0]
    assert [p.name for p in cell.phases] == ["measured"]


def test_selection_narrows_to_one_cell_but_keeps_the_protocol() -> None:
    p = build_protocol(bench(arm="adaptive", concurrency=4))
    assert [c.id for c in p.cells] == ["adaptive-c4"]
    assert p.arms == ("none", "fixed", "adaptive") and p.concurrencies == (64, 4)


@pytest.mark.parametrize(("changes", "fragment"), [
    ({"baseline": "other"}, "bench.baseline 'other' is not one of"),
    ({"arms": []}, "bench.arms is empty"),
    ({"arms": ["none", "none"], "baseline": "none"}, "lists 'none' twice"),
    ({"concurrencies": [4, 4]}, "lists 4 twice"),
    ({"concurrencies": []}, "bench.concurrencies is empty"),
    ({"arm": "ngram"}, "bench.arm=ngram is not one of"),
    ({"concurrency": 8}, "bench.concurrency=8 is not one of"),
    ({"repeats": 2, "repeat": 3}, "bench.repeat=3 is not one of the repeats 1..2"),
])
def test_bad_protocols_are_usage_errors(changes: dict[str, Any], fragment: str) -> None:
    with pytest.raises(UsageError) as exc:
        build_protocol(bench(**changes))
    assert fragment in exc.value.message


def test_max_num_seqs_must_hold_every_phase_of_the_cell() -> None:
    cell = build_protocol(bench()).cell("none", 4)
    assert cell is not None
    check_max_num_seqs(32, cell)  # the warmup at 32 is the largest phase
    with pytest.raises(UsageError) as exc:
        check_max_num_seqs(16, cell)
    assert "serving.args.max_num_seqs=32" in (exc.value.hint or "")


def test_unset_max_num_seqs_is_vllms_default() -> None:
    big = build_protocol(bench(concurrencies=[256])).cells[0]
    with pytest.raises(UsageError) as exc:
        check_max_num_seqs(None, big)
    assert f"at most {VLLM_DEFAULT_MAX_NUM_SEQS}" in exc.value.message
    assert "vLLM's default" in exc.value.message


def compose_bench(overrides: list[str]) -> Any:
    schema.register()
    return compose_config(overrides, config="bench")


def typed_bench(overrides: list[str]) -> Any:
    schema.register()
    return compose_typed(overrides, config="bench")


def test_the_seed_protocol_composes_with_the_reports_numbers() -> None:
    cfg = typed_bench(["bench=speed_bench_throughput_1k", "+hw=mi350x"])
    p = build_protocol(cfg.bench)
    assert p.arms == ("none", "dspark_fixed", "dspark_adaptive")
    assert p.concurrencies == (256, 128, 64, 32, 16, 8, 4)
    assert (p.sampling.temperature, p.sampling.top_p, p.sampling.max_output_tokens) == (
        1.0, 1.0, 2048)
    assert [(ph.num_prompts, ph.concurrency, ph.output_tokens) for ph in p.cells[-1].phases] == [
        (64, 32, 256), (64, 4, 256), (880, 4, 2048)]
    assert len(p.cells) == 21 and p.repeats == 1  # the report ran each cell once
    assert cfg.bench.dataset.kind == "speed_bench"
    assert cfg.bench.dataset.subset == "throughput_1k"
    assert cfg.serving.args.max_num_seqs >= 256


def test_the_cpu_protocol_composes() -> None:
    cfg = typed_bench(["bench=cpu", "+hw=cpu"])
    p = build_protocol(cfg.bench)
    assert p.arms == ("none", "draft_model") and len(p.concurrencies) == 2
    assert p.cells[0].measured.num_prompts < 100
    assert all(c <= cfg.serving.args.max_num_seqs for c in p.concurrencies)


@pytest.mark.parametrize("override", [
    "bench.measured_prompts=many", "bench.sampling.temprature=1.0", "bench.dataset.kind=csv"])
def test_the_schema_rejects_typos_and_wrong_types(override: str) -> None:
    from hydra.errors import ConfigCompositionException
    from omegaconf.errors import OmegaConfBaseException

    with pytest.raises((ConfigCompositionException, OmegaConfBaseException)):
        compose_bench(["bench=cpu", "+hw=cpu", override])


def test_prefix_caching_off_is_one_more_launch_per_arm_named_by_its_arm() -> None:
    """[on] (the default) adds no cell; [on, off] runs every arm twice, the variant recorded as
    the arm plus `prefix_caching`, its id `<arm>+pc-off-c<N>`, alternating like the arms."""
    assert build_protocol(bench()).cells == build_protocol(
        bench(prefix_caching=[True])).cells
    p = build_protocol(bench(arms=["none", "fixed"], concurrencies=[4],
                             prefix_caching=[True, False], repeats=2))
    assert [c.id for c in p.cells] == [
        "none-c4-r1", "none+pc-off-c4-r1", "fixed-c4-r1", "fixed+pc-off-c4-r1",
        "fixed+pc-off-c4-r2", "fixed-c4-r2", "none+pc-off-c4-r2", "none-c4-r2"]
    off = p.cell("fixed", 4, 1, prefix_caching=False)
    assert off is not None and (off.arm, off.prefix_caching, off.variant) == (
        "fixed", False, "fixed+pc-off")
    assert p.variants == ("none", "none+pc-off", "fixed", "fixed+pc-off")
    assert p.baseline_variant == "fixed"
    assert build_protocol(bench(prefix_caching=[False])).baseline_variant == "fixed+pc-off"
    # bench.arm selects an arm under every setting (a multirun job's cell)
    assert {c.id for c in build_protocol(bench(prefix_caching=[True, False], arm="none",
                                               concurrency=4)).cells} == {"none-c4",
                                                                          "none+pc-off-c4"}


@pytest.mark.parametrize("value", [[], [True, True]])
def test_a_wrong_prefix_caching_axis_is_a_usage_error(value: Any) -> None:
    with pytest.raises(UsageError, match=r"bench\.prefix_caching"):
        build_protocol(bench(prefix_caching=value))


def test_the_schema_reads_on_and_off_from_yaml_and_the_command_line() -> None:
    schema.register()
    cfg = compose_config(["+hw=cpu", "bench.prefix_caching=[on,off]"], config="bench")
    assert list(cfg.bench.prefix_caching) == [True, False]
    assert list(compose_config(["+hw=cpu"], config="bench").bench.prefix_caching) == [True]


def test_a_cell_records_the_protocols_identity_and_reads_back_a_protocol_that_plans_nothing(
        ) -> None:
    """One Protocol: what every cell.json records of it is what identifies it; read back, it
    has the same arms, variants and baseline and no plan (no cells, no sampling)."""
    planned = build_protocol(bench(repeats=2, prefix_caching=[True, False]))
    back = Protocol.from_dict(json.loads(json.dumps(planned.to_dict())))
    assert back.to_dict() == planned.to_dict()
    assert (back.variants, back.baseline_variant) == (planned.variants, planned.baseline_variant)
    assert planned.requests.max_output_tokens == 2048 and planned.cells
    assert (back.cells, back.sampling) == ((), None)
    with pytest.raises(ValueError, match="plans no request"):
        back.requests  # noqa: B018
