"""smoke: expectations composed from the real config files, the pure checks, and the verdict."""

from __future__ import annotations

import pytest

from dspark_cli.config import smoke as smoke_schema
from dspark_cli.config.choices import DraftTokensRule
from dspark_cli.config.smoke import SmokePrimary
from dspark_cli.errors import ExitCode, UsageError
from dspark_cli.server.logscan import scan_lines
from dspark_cli.server.metrics import parse
from dspark_cli.smoke.checks import (
    Boot,
    CheckResult,
    Observations,
    RequestOutcome,
    RequestState,
    check_draft_params,
    check_generation,
    check_spec_decode,
    decide,
    evaluate,
    spec_problems,
)
from dspark_cli.smoke.expectations import expectations
from dspark_cli.status import Status
from tests.conftest import compose_typed


def smoke_cfg(*overrides: str) -> SmokePrimary:
    """`dspark smoke <overrides>`'s config, as the command edge hands it on."""
    smoke_schema.register()
    return compose_typed(list(overrides), config="smoke")


# What broken servers print (vllm-dspark-facts.md), one per configured fatal pattern.
FAULT_LINES = {
    "rocm_memory_fault": "Memory access fault by GPU node-2 (Agent handle: 0x55d1) on address "
                         "0x7f3a. Reason: Page not present or supervisor privilege.",
    "hsa_error": ":0:rocdevice.cpp:2891: Callback: Queue aborting with error : "
                        "HSA_STATUS_ERROR_MEMORY_FAULT: Agent attempted to access an "
                        "inaccessible address. code: 0x2b",
    "gpu_hang": "HW Exception by GPU node-3 (Agent handle: 0x5619) reason :GPU Hang",
    "illegal_memory_access": "RuntimeError: CUDA error: an illegal memory access was "
                                  "encountered",
    "launch_failure": "RuntimeError: CUDA error: unspecified launch failure",
    "out_of_memory": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "nccl_error": "RuntimeError: NCCL error: unhandled cuda error",
    "gpu_error": "RuntimeError: CUDA error: device-side assert triggered",
    "ray_worker_died": "RayWorkerProc rank=[1] died unexpectedly, shutting down executor.",
    "worker_died": "ERROR 11-29 [multiproc_executor.py:150] Worker proc VllmWorker-0 died "
                   "unexpectedly (exit code: -4), shutting down executor.",
    "engine_core_died": "ERROR [core_client.py:564] Engine core process EngineCore_DP0 died "
                        "unexpectedly.",
    "engine_core_failed": "(EngineCore_DP0 pid=1) ERROR [core.py:708] EngineCore failed to start.",
    "engine_dead": "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    "fatal_python_error": "Fatal Python error: Illegal instruction",
    "traceback": "(EngineCore_DP0 pid=1) Traceback (most recent call last):",
}
HEALTHY_LINES = [
    "INFO 11-29 16:40:00 [api_server.py:1880] vLLM API server version 0.32.0",
    "INFO 11-29 16:40:31 [gpu_model_runner.py:2001] DSpark draft model loaded: 97 params",
    "INFO 11-29 16:40:31 [indexer.py:88] DSA indexer decode path: use_flattening=True "
    "supports_varlen=True",
    "INFO 11-29 16:40:40 [cuda_graph.py:12] Breakable CUDA graph enabled",
    "INFO 11-29 16:40:50 [loggers.py:248] SpecDecoding metrics: Mean acceptance length: 2.61, "
    "Accepted: 29 tokens, Drafted: 126 tokens, Per-position acceptance rate: 0.5, 0.3",
    "INFO:     Application startup complete.",
    'INFO:     127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK',
]


def test_every_fatal_pattern_catches_its_line_and_no_healthy_line() -> None:
    exp = expectations(smoke_cfg("+hw=cpu"))
    assert {p.name for p in exp.fatal} == set(FAULT_LINES)
    for name, line in FAULT_LINES.items():
        snap = scan_lines([*HEALTHY_LINES, line], exp.fatal)
        assert [e.pattern for e in snap.fatal] == [name], line
    assert scan_lines(HEALTHY_LINES, exp.fatal).fatal == ()


def test_a_fatal_pattern_set_to_null_is_switched_off() -> None:
    exp = expectations(smoke_cfg("+hw=cpu", "logs.fatal.traceback=null"))
    assert "traceback" not in {p.name for p in exp.fatal}
    assert scan_lines([FAULT_LINES["traceback"]], exp.fatal).fatal == ()


def test_cpu_default_is_draft_model_k3_with_the_startup_line() -> None:
    exp = expectations(smoke_cfg("+hw=cpu"))
    assert [p.name for p in exp.required] == ["Application startup complete"]
    assert exp.spec is not None
    assert (exp.spec.method, exp.spec.k, exp.spec.rule) == ("draft_model", 3, DraftTokensRule.exact)
    assert exp.draft_params is None
    assert exp.max_tokens == 48


def test_rocm_dspark_profile_requires_the_reports_lines() -> None:
    exp = expectations(smoke_cfg("+hw=mi350x"))
    required = [p.name for p in exp.required]
    for line in ("Application startup complete", "DSpark draft model loaded",
                 "Breakable CUDA graph enabled", "use_flattening=True"):
        assert line in required
    assert exp.spec is not None and (exp.spec.method, exp.spec.k) == ("dspark", 7)
    assert exp.draft_params is not None and exp.draft_params.expected == 97
    snap = scan_lines(HEALTHY_LINES, (), exp.required)
    assert set(snap.found) == set(required)


def test_cuda_profile_does_not_require_the_rocm_indexer_line() -> None:
    required = [p.name for p in expectations(smoke_cfg("+hw=h200")).required]
    assert "use_flattening=True" not in required
    assert "DSpark draft model loaded" in required


def test_fixed_k_dspark_does_not_require_breakable_graphs() -> None:
    required = [p.name for p in
                expectations(smoke_cfg("+hw=mi350x", "speculative=dspark_fixed")).required]
    assert "Breakable CUDA graph enabled" not in required


def test_ngram_allows_fewer_draft_tokens_and_none_has_no_spec_rule() -> None:
    ngram = expectations(smoke_cfg("+hw=cpu", "speculative=ngram")).spec
    assert ngram is not None and ngram.rule is DraftTokensRule.at_most
    assert expectations(smoke_cfg("+hw=cpu", "speculative=none")).spec is None


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("+logs.fatal.broken='(unclosed'", "logs.fatal"),
        ("logs.draft_params='loaded: \\d+'", "named group"),
        ("smoke.max_tokens=0", "must be positive"),
        ("smoke.conditional_lines=[{when:{hw.plaftorm:rocm},lines:[x]}]", "hw.plaftorm"),
    ],
)
def test_bad_smoke_config_is_a_usage_error(override: str, message: str) -> None:
    base = "+hw=mi350x" if "draft_params" in override else "+hw=cpu"
    with pytest.raises(UsageError, match=message):
        expectations(smoke_cfg(base, override))


@pytest.mark.parametrize(
    ("counters", "k", "rule", "problems"),
    [
        ((18, 126, 29), 7, DraftTokensRule.exact, []),  # the validation report's counters
        ((18, 125, 29), 7, DraftTokensRule.exact, ["draft tokens 125 != drafts x K = 18 x 7"]),
        ((18, 100, 29), 7, DraftTokensRule.at_most, []),
        ((18, 127, 29), 7, DraftTokensRule.at_most, ["draft tokens 127 > drafts x K = 18 x 7"]),
        ((0, 0, 0), 3, DraftTokensRule.exact, ["no drafts: speculative decoding did not run"]),
        ((4, 12, 13), 3, DraftTokensRule.exact, ["accepted 13 > draft tokens 12"]),
        ((4, 9, 2), None, DraftTokensRule.exact, []),  # K unknown: only K-free rules apply
    ],
)
def test_spec_problems(counters: tuple[int, int, int], k: int | None, rule: DraftTokensRule,
                       problems: list[str]) -> None:
    assert spec_problems(*counters, k, rule) == problems


def _scrape(gen: int, drafts: int = 0, draft_tokens: int = 0, accepted: int = 0):
    text = f'vllm:generation_tokens_total{{engine="0"}} {gen}\n'
    if drafts or draft_tokens:
        text += (f"vllm:spec_decode_num_drafts_total {drafts}\n"
                 f"vllm:spec_decode_num_draft_tokens_total {draft_tokens}\n"
                 f"vllm:spec_decode_num_accepted_tokens_total {accepted}\n")
    return parse(text)


def _served(tokens: int, before, after) -> Observations:
    return Observations(managed=True, boot=Boot(True, 1.0),
                        request=RequestOutcome(RequestState.ok, 0.5, 200, tokens),
                        metrics_before=before, metrics_after=after)


def test_generation_checks_usage_and_the_server_counter() -> None:
    exp = expectations(smoke_cfg("+hw=cpu"))
    ok = check_generation(exp, _served(48, _scrape(100), _scrape(148)))
    assert ok.status is Status.passed and ok.data["server_counter_delta"] == 48
    # The client was told 48 but the server generated 96 (a tokenizer mismatch, a retry...).
    assert check_generation(exp, _served(48, _scrape(100), _scrape(196))).failed
    assert check_generation(exp, _served(41, _scrape(0), _scrape(41))).failed
    assert check_generation(exp, _served(48, None, None)).failed  # fail closed


def test_spec_decode_uses_the_delta_over_the_request() -> None:
    exp = expectations(smoke_cfg("+hw=cpu"))
    before, after = _scrape(10, 5, 15, 4), _scrape(58, 23, 69, 30)
    result = check_spec_decode(exp, _served(48, before, after))
    assert result.status is Status.passed, result.evidence
    assert (result.data["drafts"], result.data["draft_tokens"]) == (18, 54)
    assert result.data["mean_acceptance_length"] == round(1 + 26 / 18, 4)
    missing = check_spec_decode(exp, _served(48, _scrape(0), _scrape(48)))
    assert missing.failed and "no vllm:spec_decode" in missing.evidence


def test_draft_params_mismatch_hints_at_the_confidence_head() -> None:
    exp = expectations(smoke_cfg("+hw=mi350x"))
    lines = ["DSpark draft model loaded: 96 params", "Application startup complete"]
    assert exp.draft_params is not None
    log = scan_lines(lines, exp.fatal, (*exp.required, exp.draft_params.pattern))
    obs = Observations(managed=True, boot=Boot(True, 1.0), log=log)
    result = check_draft_params(exp, obs)
    assert result.failed and "confidence head" in result.evidence


def test_an_early_stop_reports_every_check_and_fails_on_the_event() -> None:
    exp = expectations(smoke_cfg("+hw=cpu"))
    log = scan_lines(["INFO:     Application startup complete.", FAULT_LINES["gpu_hang"]],
                     exp.fatal, exp.required)
    obs = Observations(managed=True, boot=Boot(True, 2.0), log=log,
                       request=RequestOutcome(RequestState.interrupted),
                       stopped_by="a fatal log line")
    results = {r.name: r for r in evaluate(exp, obs)}
    assert results["no_fatal_lines"].failed
    assert "gpu_hang" in results["no_fatal_lines"].evidence
    assert {results[n].status for n in ("request", "generation", "spec_decode")} == {
        Status.not_run}
    assert decide(list(results.values())).exit_code is ExitCode.CHECK_FAILED


@pytest.mark.parametrize(
    ("statuses", "code"),
    [
        ({"health": Status.passed, "request": Status.skipped}, ExitCode.OK),
        ({"health": Status.passed, "generation": Status.failed}, ExitCode.CHECK_FAILED),
        ({"health": Status.failed, "request": Status.not_run}, ExitCode.SERVER),
        ({"server_alive": Status.failed, "request": Status.failed}, ExitCode.SERVER),
    ],
)
def test_verdict_exit_codes(statuses: dict[str, Status], code: ExitCode) -> None:
    results = [CheckResult(name, status, f"{name} evidence") for name, status in statuses.items()]
    verdict = decide(results)
    assert verdict.exit_code is code
    assert verdict.passed is (code is ExitCode.OK)


def test_background_check_fails_closed_and_vetoes_only_once_failed() -> None:
    import threading

    from dspark_cli.smoke.runner import BackgroundCheck

    gate = threading.Event()

    def slow_rejection() -> tuple[bool, str]:
        gate.wait(5)
        return False, "vLLM rejects the command at engine-config: bad key"

    pending = BackgroundCheck("vllm_accepts_command", slow_rejection)
    assert pending.rejection() is None  # still running: no veto yet
    gate.set()
    assert pending.result().failed
    assert pending.rejection() == "vLLM rejects the command at engine-config: bad key"

    def crash() -> tuple[bool, str]:
        raise RuntimeError("validator crashed")

    crashed = BackgroundCheck("vllm_accepts_command", crash).result()
    assert crashed.failed and "validator crashed" in crashed.evidence
    passed = BackgroundCheck("vllm_accepts_command", lambda: (True, "accepted")).result()
    assert passed.status is Status.passed


def test_a_raced_call_ends_done_failed_interrupted_or_timed_out() -> None:
    import threading

    from dspark_cli.smoke.runner import race

    def boom() -> None:
        raise OSError("connection reset")

    never = threading.Event()
    assert race(lambda: 42, 5, lambda: None) == ("done", 42)
    kind, exc = race(boom, 5, lambda: None)
    assert kind == "error" and isinstance(exc, OSError)
    assert race(lambda: never.wait(5), 5, lambda: "the server died") == ("interrupted",
                                                                          "the server died")
    assert race(lambda: never.wait(5), 0.1, lambda: None) == ("timeout", None)
    never.set()
