"""Every value is range-checked before anything runs: exit 2, naming the key and the range.
Each of these rendered a command (exit 0) before."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from dspark_cli.config import schema
from dspark_cli.config.strict import check_ranges
from dspark_cli.errors import UsageError
from dspark_cli.launch.plan import build_plan
from tests.conftest import compose_config, compose_typed, run_dspark

# (override, the range the message names)
OUT_OF_RANGE = [
    ("speculative.num_speculative_tokens=-3", ">= 1"),
    ("speculative.num_speculative_tokens=0", ">= 1"),
    ("server.port=70000", "<= 65535"),
    ("server.port=-1", ">= 1"),
    ("server.port=0", ">= 1"),
    ("serving.args.max_num_seqs=-5", ">= 1"),
    ("serving.args.max_num_batched_tokens=0", ">= 1"),
    ("serving.args.gpu_memory_utilization=1.5", "<= 1"),
    ("serving.args.gpu_memory_utilization=0", "> 0"),
    ("serving.args.gpu_memory_utilization=nan", "> 0"),
    ("serving.args.gpu_memory_utilization=inf", "> 0"),
    ("hw.args.tensor_parallel_size=0", ">= 1"),
    ("hw.args.tensor_parallel_size=-8", ">= 1"),
    ("hw.args.data_parallel_size=0", ">= 1"),
    ("hw.args.pipeline_parallel_size=-1", ">= 1"),
    ("hw.num_gpus=-1", ">= 0"),
    ("hw.nodes=0", ">= 1"),
    ("model.path=", "non-empty"),
    ("model.path='  '", "non-empty"),
    ("model.args.max_model_len=0", ">= 1"),
    ("model.args.served_model_name=''", "non-empty"),
    ("compilation.mode=7", "<= 3"),
    ("compilation.max_cudagraph_capture_size=0", ">= 1"),
    ("server.ready_timeout_s=0", "> 0"),
    ("server.stop_grace_s=-1", ">= 0"),
    ("server.attach_refused_s=-1", ">= 0"),
    ("server.metrics_settle_s=-1", ">= 0"),
    ("server.host=''", "non-empty"),
    ("logs.context_lines=-1", ">= 0"),
]


@pytest.mark.parametrize(("override", "allowed"), OUT_OF_RANGE)
def test_out_of_range_is_refused_naming_key_and_range(override: str, allowed: str) -> None:
    with pytest.raises(UsageError) as e:
        check_ranges(compose_config(["+hw=mi350x", override]))
    key = override.split("=")[0]
    assert f"`{key}=" in e.value.message and allowed in e.value.message


@pytest.mark.parametrize("override", ["speculative.num_speculative_tokens=-3", "server.port=70000",
                                      "model.path=", "serving.args.gpu_memory_utilization=1.5"])
def test_the_cli_refuses_before_anything_runs(override: str) -> None:
    result = run_dspark("serve", "+hw=mi350x", override, "--dry-run")
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert override.split("=")[0] in result.stderr and "allowed" in result.stderr
    assert "Traceback" not in result.stderr


def test_gpu_detection_patterns_must_be_regular_expressions() -> None:
    with pytest.raises(UsageError, match=r"`hw.detect` value '\(' is not a regular expression"):
        check_ranges(compose_config(["+hw=mi350x", "hw.detect=['MI350','(']"]))


def test_every_profile_is_in_range() -> None:
    for hw in ("mi350x", "mi355x", "mi300x", "h200", "b200", "cpu"):
        check_ranges(compose_config([f"+hw={hw}"]))


def _numeric_fields(kind: type, prefix: str = "") -> list[tuple[str, dict]]:
    hints = typing.get_type_hints(kind)
    found = []
    for f in dataclasses.fields(kind):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            found += _numeric_fields(hint, f"{prefix}{f.name}.")
        elif {int, float} & set(typing.get_args(hint) or (hint,)):
            found.append((f"{prefix}{f.name}", dict(f.metadata)))
    return found


def test_every_numeric_field_of_the_schema_declares_its_range() -> None:
    unranged = [k for k, meta in _numeric_fields(schema.LaunchConf) if "domain" not in meta]
    assert unranged == []


@pytest.mark.parametrize(("override", "message"), [
    ("+serving.extra_args.block_size=0", ">= 1"),
    ("+serving.extra_args.data_parallel_rpc_port=70000", "<= 65535"),
    ("+serving.extra_args.cpu_offload_gb=-1", ">= 0"),
    ("+serving.extra_args.max_loras=0", ">= 1"),
    ("+serving.extra_args.max_logprobs=-2", ">= -1"),
    ("+serving.extra_args.scheduling_policy=lifo", "fcfs, priority"),
    ("+serving.extra_args.enable_chunked_prefill=yes", "true or false"),
    ("+serving.extra_args.max_loras=two", "integer"),
    ("+serving.extra_args.max_loras=true", "integer"),
    ("+serving.extra_args.cpu_offload_gb=nan", "finite"),
    ("+serving.extra_args.disable_log_stats=false", "switched on"),
    ("+serving.extra_args.max_num_scheduled_tokens=-5", ">= 1"),  # vLLM's optional int
    ("+serving.extra_args.kv_cache_memory_bytes=lots", "like 8192 or 8k"),
    ("+serving.extra_args.grpc_port=0", ">= 1"),
])
def test_free_form_values_of_known_options_are_checked(override: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        build_plan(compose_typed(["+hw=mi350x", override]))


@pytest.mark.parametrize("override", ["+serving.extra_args.seed=-1",
                                      "+serving.extra_args.max_logprobs=-1",
                                      "+serving.extra_args.ubatch_size=0",
                                      "+serving.extra_args.cpu_offload_gb=0",
                                      "+serving.extra_args.kv_cache_memory_bytes=8G"])
def test_vllms_own_special_values_stay_allowed(override: str) -> None:
    build_plan(compose_typed(["+hw=mi350x", override]))
