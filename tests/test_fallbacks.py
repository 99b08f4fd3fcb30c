"""Speculative decoding's silent fallbacks as findings: the log families for a cut capture
ceiling, the model runner chosen, adaptive verification refused (read out of the installed
vLLM's source, as the fatal families are), the online estimator's silence, and the cell rules
(`bench/cell.py`): an adaptive arm that ran without it is invalid, an arm that accepts
nothing is flagged."""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from dspark_cli.bench.cell import acceptance_flag, adaptive_reasons
from dspark_cli.paths import conf_dir
from dspark_cli.server.logscan import Pattern, compile_patterns, scan_lines
from dspark_cli.smoke.checks import Boot, Observations, check_fallbacks, check_overrides
from dspark_cli.smoke.expectations import expectations
from dspark_cli.status import Status
from tests.test_fatal_patterns import families, source_message
from tests.test_smoke_checks import smoke_cfg

PREFIX = "(EngineCore_DP0 pid=4242) WARNING 12-01 09:00:00 [vllm.py:2521] "


@cache
def logs() -> tuple[Pattern, ...]:
    """The degraded, fallback and evidence families, which must not overlap."""
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("logs/vllm")
    return tuple(p for group in ("degraded", "fallbacks", "evidence")
                 for p in compile_patterns({k: v for k, v in cfg.logs[group].items() if v}))


# (family, vLLM source file, a piece of the message, logger arguments)
FROM_SOURCE = [
    ("cudagraph_truncated", "config/vllm.py", "Truncating max_cudagraph_capture_size", "1536"),
    ("cudagraph_truncated", "config/vllm.py", "is overridden by config", "[1, 2, 4096]",
     "[1, 2]"),
    ("model_runner_v1", "config/vllm.py", "Model Runner V2 requires Triton"),
    ("model_runner_v1", "config/vllm.py", "does not yet support %s; using the V1", "dspark"),
    ("model_runner_v1", "config/vllm.py", "Model Runner V1 does not support", "dspark"),
    ("adaptive_refused", "v1/worker/gpu/spec_decode/adaptive_verification.py",
     "could not profile step costs"),
    ("adaptive_refused", "v1/worker/gpu/spec_decode/adaptive_verification.py",
     "trims verification requests on device", "FLASHMLA_SPARSE"),
    ("adaptive_refused", "v1/worker/gpu/spec_decode/adaptive_verification.py",
     "replays decode cudagraphs", "8", "TRITON_MLA", "1"),
    ("adaptive_refused", "config/vllm.py", "Adaptive verification requires full CUDA graphs"),
    ("adaptive_refused", "config/vllm.py", "Adaptive verification is not currently compatible "
     "with LoRA"),
    ("adaptive_refused", "v1/worker/gpu/spec_decode/speculator.py",
     "without a confidence head estimates"),
]
EVIDENCE = [("model_runner_v2", "v1/worker/gpu_worker.py", "Using V2 Model Runner")]


@pytest.mark.vllm  # reads the installed vLLM's source
@pytest.mark.parametrize(("family", "path", "needle", "args"),
                         [(f, p, n, a) for f, p, n, *a in [*FROM_SOURCE, *EVIDENCE]],
                         ids=[f"{f}:{n[:30]}" for f, _, n, *_ in [*FROM_SOURCE, *EVIDENCE]])
def test_each_family_matches_the_installed_vllms_words_and_is_not_fatal(
        family: str, path: str, needle: str, args: list[str]) -> None:
    line = PREFIX + source_message(path, needle, *args)
    assert [p.name for p in logs() if p.search(line)] == [family], line
    assert not [p.name for p in families() if p.search(line)]


@pytest.mark.vllm  # reads the installed vLLM's source
def test_the_online_estimator_and_the_adaptive_profile_log_nothing() -> None:
    """vLLM switches to its online acceptance estimator (no confidence head) and profiles the
    adaptive step costs without a line of their own at INFO or above: a new one in a later vLLM
    fails here, to be given a family."""
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin
    root = Path(spec.origin).parent / "v1/worker/gpu/spec_decode"
    said = []
    for path in [root / "speculator.py", root / "acceptance_estimator.py",
                 root / "adaptive_verification.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "logger"
                    and node.func.attr.startswith(("info", "warning"))):
                said.append(ast.unparse(node))
    assert not [s for s in said if "estimat" in s.lower() or "profil" in s.lower()], said


def test_the_smoke_reports_them_and_fails_only_an_adaptive_launch() -> None:
    """A truncated capture ceiling is a degraded line (`overrides`); the V1 runner a fallback,
    reported, failing the smoke only where adaptive verification was asked for."""
    exp = expectations(smoke_cfg("+hw=cpu"))
    truncated = PREFIX + "Truncating max_cudagraph_capture_size to 1536"
    v1 = PREFIX + "Model Runner V2 requires Triton; using the V1 model runner instead."
    obs = Observations(managed=True, boot=Boot(True, 1.0),
                       log=scan_lines(["INFO ready", truncated, v1], exp.fatal, exp.watch))
    assert check_overrides(exp, obs).data["lines"] == [f"cudagraph_truncated: {truncated}"]
    result = check_fallbacks(exp, obs)
    assert result.status is Status.passed and result.evidence.startswith("FALLBACK: ")
    assert result.data["lines"] == [f"model_runner_v1: {v1}"]
    failed = check_fallbacks(replace(exp, adaptive=True), obs)
    assert failed.status is Status.failed and "adaptive verification was asked for" in (
        failed.evidence)
    clean = Observations(managed=True, boot=Boot(True, 1.0),
                         log=scan_lines(["INFO ready"], exp.fatal, exp.watch))
    assert check_fallbacks(replace(exp, adaptive=True), clean).status is Status.passed


def test_an_adaptive_arm_that_ran_without_it_is_invalid() -> None:
    v1 = "model_runner_v1: WARNING Model Runner V2 requires Triton; using the V1 model runner"
    assert adaptive_reasons(True, [], None) == ()
    assert adaptive_reasons(False, [v1], None) == ()
    (reason,) = adaptive_reasons(True, [v1], None)
    assert reason.startswith("adaptive verification asked for, but the log shows model_runner_v1")
    short = {"params": 96, "expected": 97, "ok": False,
             "sentence": "DSpark draft loaded 96 params, pinned 97"}
    (reason,) = adaptive_reasons(True, [], short)
    assert "online acceptance estimator" in reason and "96 params" in reason
    assert adaptive_reasons(True, [], {**short, "params": 97, "ok": True}) == ()


def test_an_arm_that_accepts_nothing_is_flagged() -> None:
    zero = {"drafts": 10, "draft_tokens": 30, "accepted": 0}
    assert acceptance_flag(zero, 0.0)["flagged"] is True
    assert acceptance_flag({**zero, "accepted": 6}, 0.0)["flagged"] is False
    assert acceptance_flag({**zero, "accepted": 6}, 0.25)["flagged"] is True
    assert acceptance_flag(zero, None) is None and acceptance_flag(None, 0.0) is None
