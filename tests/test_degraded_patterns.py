"""The "vLLM overrode what was asked" families (`logs.degraded`, conf/logs/vllm.yaml) match what
the installed vLLM prints, read out of its source as the fatal families are; they are never
fatal; the smoke reports them (passing) and a bench cell that shows one is marked degraded."""

from __future__ import annotations

from functools import cache

import pytest
from hydra import compose, initialize_config_dir

from dspark_cli.bench.cell import CellRecord
from dspark_cli.bench.summary import summarize
from dspark_cli.paths import conf_dir
from dspark_cli.server.logscan import Pattern, compile_patterns, degraded_lines, scan_lines
from dspark_cli.smoke.checks import Boot, Observations, check_overrides
from dspark_cli.smoke.expectations import expectations
from dspark_cli.status import Status
from tests.test_fatal_patterns import families, source_message
from tests.test_smoke_checks import HEALTHY_LINES, smoke_cfg

PREFIX = "(EngineCore_DP0 pid=4242) WARNING 12-01 09:00:00 [vllm.py:1883] "

# (family, vLLM source file, a piece of the message, logger arguments)
FROM_SOURCE = [
    ("cudagraph_downgrade", "config/vllm.py", "Pooling models do not support full cudagraphs"),
    ("cudagraph_downgrade", "config/vllm.py", "Dynamic speculative decoding changes", "FULL"),
    ("cudagraph_downgrade", "config/vllm.py", "Overriding cudagraph_mode to FULL_DECODE_ONLY",
     "FULL_AND_PIECEWISE"),
    ("cudagraph_downgrade", "config/vllm.py", "is not compatible with compilation mode",
     "CUDAGraphMode.PIECEWISE", "CompilationMode.NONE", "CUDAGraphMode.NONE"),
    ("cudagraph_downgrade", "config/vllm.py", "Runner V2. Overriding cudagraph_mode", "FULL"),
    ("cudagraph_downgrade", "config/vllm.py", "requires PIECEWISE CUDA graph mode", "Nixl",
     "FULL"),
    ("cudagraph_downgrade", "config/compilation.py", "requires piecewise capture",
     "CUDAGraphMode.FULL_AND_PIECEWISE", "CUDAGraphMode.FULL"),
    ("spec_rejection_fallback", "v1/worker/gpu_model_runner.py",
     "legacy speculative rejection", "req-1"),
    ("kernel_fallback", "v1/attention/ops/chunked_prefill_paged_decode.py",
     "falling back to Triton implementation"),
    ("kernel_fallback", "config/vllm.py", "Falling back to CUTLASS", "deepseek_v4"),
    ("kernel_fallback", "v1/sample/ops/topk_topp_sampler.py", "Falling back to PyTorch-native"),
    ("kernel_fallback", "v1/attention/backends/mla/flashinfer_mla.py",
     "falling back to the cute-dsl backend", "32"),
    ("kernel_fallback", "v1/attention/ops/flydsl_turboquant_decode.py",
     "Falling back to SoA Triton decode", "x"),
    ("dtype_fallback", "config/model.py", "for compatibility.", "'MI300X'", "torch.bfloat16",
     "torch.float16"),
]


@cache
def degraded() -> tuple[Pattern, ...]:
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("logs/vllm")
    return compile_patterns(dict(cfg.logs.degraded))


@pytest.mark.vllm  # reads the installed vLLM's source
@pytest.mark.parametrize(("family", "path", "needle", "args"),
                         [(f, p, n, a) for f, p, n, *a in FROM_SOURCE],
                         ids=[f"{f}:{n[:30]}" for f, _, n, *_ in FROM_SOURCE])
def test_each_family_matches_the_installed_vllms_words_and_is_not_fatal(
        family: str, path: str, needle: str, args: list[str]) -> None:
    line = PREFIX + source_message(path, needle, *args)
    assert [p.name for p in degraded() if p.search(line)] == [family]
    assert not [p.name for p in families() if p.search(line)]


def test_no_family_matches_a_healthy_line() -> None:
    for line in HEALTHY_LINES:
        assert not [p.name for p in degraded() if p.search(line)], line


def downgrade_line() -> str:
    return PREFIX + source_message("config/vllm.py", "Dynamic speculative decoding changes",
                                   "FULL")


@pytest.mark.vllm  # downgrade_line() reads the installed vLLM's source
def test_the_smoke_reports_an_override_and_still_passes() -> None:
    exp = expectations(smoke_cfg("+hw=cpu"))
    assert {p.name for p in exp.degraded} == {p.name for p in degraded()}
    lines = [*HEALTHY_LINES[:2], downgrade_line(), HEALTHY_LINES[-2]]
    obs = Observations(managed=True, boot=Boot(True, 1.0),
                       log=scan_lines(lines, exp.fatal, exp.watch))
    result = check_overrides(exp, obs)
    assert result.status is Status.passed
    assert result.evidence.startswith("DEGRADED: vLLM overrode what was asked: "
                                      "cudagraph_downgrade: ")
    assert result.data["lines"] == [f"cudagraph_downgrade: {downgrade_line()}"]
    clean = check_overrides(exp, Observations(managed=True, boot=Boot(True, 1.0),
                                              log=scan_lines(HEALTHY_LINES, exp.fatal,
                                                             exp.watch)))
    assert clean.status is Status.passed and clean.data["lines"] == []
    assert check_overrides(exp, Observations(managed=False, boot=Boot(True, 1.0))).status \
        is Status.skipped


@pytest.mark.vllm  # downgrade_line() reads the installed vLLM's source
def test_a_family_set_to_null_is_switched_off() -> None:
    exp = expectations(smoke_cfg("+hw=cpu", "logs.degraded.cudagraph_downgrade=null"))
    log = scan_lines([downgrade_line()], exp.fatal, exp.watch)
    assert degraded_lines(log, exp.degraded) == ()


@pytest.mark.vllm  # downgrade_line() reads the installed vLLM's source
def test_a_degraded_cell_stays_valid_and_is_marked() -> None:
    protocol = {"name": "cpu", "arms": ["none", "draft_model"], "baseline": "none",
                "concurrencies": [2]}
    line = f"cudagraph_downgrade: {downgrade_line()}"
    recs = [CellRecord.from_dict({"arm": arm, "concurrency": 2, "valid": True, "reasons": [],
                                  "output_throughput": 10.0, "protocol": protocol,
                                  "degraded": [line] if arm == "draft_model" else []})
            for arm in ("none", "draft_model")]
    assert recs[1].to_dict()["degraded"] == [line]
    s = summarize(recs, protocol="cpu", arms=protocol["arms"], baseline="none",
                  concurrencies=[2]).as_dict()
    assert [c["degraded"] for c in s["cells"]] == [[], [line]]
    assert s["counts"]["degraded"] == 1 and s["counts"]["valid"] == 2
