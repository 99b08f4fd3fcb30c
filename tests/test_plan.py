"""The pure pieces of planning: flag rendering, config merging and their errors."""

from __future__ import annotations

import pytest

from dspark_cli.errors import UsageError
from dspark_cli.launch.plan import build_plan, render_flag
from tests.conftest import compose_typed


@pytest.mark.parametrize(("dest", "value", "argv"), [
    ("enforce_eager", True, ["--enforce-eager"]),
    ("enable_prefix_caching", False, ["--no-enable-prefix-caching"]),
    ("max_num_seqs", 256, ["--max-num-seqs", "256"]),
    ("gpu_memory_utilization", 0.8, ["--gpu-memory-utilization", "0.8"]),
    ("dtype", None, []),
    ("speculative_config", {"method": "dspark", "k": [1, 2], "s": 'a"b'},
     ["--speculative-config", '{"method":"dspark","k":[1,2],"s":"a\\"b"}']),
    ("served_model_name", ["a", "b"], ["--served-model-name", "a", "b"]),
])
def test_render_flag(dest: str, value: object, argv: list[str]) -> None:
    assert render_flag(dest, value) == argv


def test_extra_args_render_after_the_seed_flags() -> None:
    cfg = compose_typed(["+hw=mi350x", "+serving.extra_args.enable-chunked-prefill=true"])
    assert build_plan(cfg).argv[-1] == "--enable-chunked-prefill"


@pytest.mark.parametrize(("overrides", "message"), [
    (["+hw=mi350x", "+serving.extra_args.max_num_seqs=8"], "serving.args.max_num_seqs"),
    (["+hw=mi350x", "+serving.extra_args.enable-chunked-prefill=true",
      "+serving.extra_args.enable_chunked_prefill=false"], "already sets"),
    (["+hw=mi350x", "+serving.extra_args.Bad_Flag=1"], "is not an option of .*vLLM 0.32"),
    (["+hw=mi350x", "+model.env.VLLM_ROCM_USE_AITER=0"], "conflicts with"),
    (["+hw=mi350x", "+model.env.BAD-NAME=1"], "not a valid environment variable name"),
])
def test_contradictory_config_is_a_usage_error(overrides: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        build_plan(compose_typed(overrides))


def test_client_url_uses_loopback_when_binding_all_interfaces() -> None:
    plan = build_plan(compose_typed(["+hw=cpu", "server.port=9100"]))
    assert plan.base_url == "http://127.0.0.1:9100"
    plan = build_plan(compose_typed(["+hw=cpu", "server.url=http://10.0.0.5:8000/"]))
    assert plan.base_url == "http://10.0.0.5:8000"


def test_draft_model_speculative_config_points_at_the_model() -> None:
    plan = build_plan(compose_typed(["+hw=cpu", "speculative=draft_model"]))
    assert plan.arg("speculative_config") == {
        "method": "draft_model", "model": plan.model_path, "num_speculative_tokens": 3}
