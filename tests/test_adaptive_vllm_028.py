"""vLLM 0.28.0, the first vLLM with adaptive verification, as dspark's smoke reads it: the exact
words it prints when it refuses adaptive verification (each with its file:line in vLLM 0.28.0's
source, which is not installed here, so the strings are held here), and the verify widths its
spec-decode counters show for a draft pinned exact (vLLM 0.28 has no per-request metrics, and
its counters count every scheduled slot, trimmed or not)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hydra import compose, initialize_config_dir

from dspark_cli.paths import conf_dir
from dspark_cli.server.logscan import compile_patterns, scan_lines
from dspark_cli.server.metrics import (
    ADAPTIVE,
    EXACT_COUNTERS,
    FIXED,
    FULL_K,
    TRIMMED,
    UNEXPECTED,
    SpecDecode,
    expected_of,
    judge,
    observed,
    parse,
    spec_decode,
    verify_widths,
)
from dspark_cli.smoke.checks import (
    Boot,
    Observations,
    RequestOutcome,
    RequestState,
    check_engagement,
    check_fallbacks,
    log_evidence,
)
from dspark_cli.smoke.expectations import StepsExpect, expectations
from dspark_cli.status import Status
from tests.test_smoke_checks import smoke_cfg

PREFIX = "(EngineCore_DP0 pid=4242) ERROR 12-07 00:00:00 [core.py:1012] ValueError: "
# (vLLM 0.28.0 file:line, the message as it is raised), every adaptive refusal it has.
REFUSALS_028 = [
    ("v1/worker/gpu/spec_decode/dspark/speculator.py:111-117",
     "Adaptive verification needs a DSpark checkpoint with a confidence head, and this one has "
     "none. Pass enable_adaptive_verification=false in the speculative config to verify a fixed "
     "number of drafts instead."),
    ("v1/worker/gpu/spec_decode/adaptive_verification.py:225-229",
     "Adaptive verification could not profile step costs. Pass "
     "`enable_adaptive_verification=false` in the speculative config to verify a fixed number "
     "of drafts instead."),
    ("v1/worker/gpu/spec_decode/adaptive_verification.py:455-460",
     "Adaptive verification trims verification requests on device, which the FLASHMLA_SPARSE "
     "attention backend does not support. Pass enable_adaptive_verification=false in the "
     "speculative config, or use a backend that does."),
    ("v1/worker/gpu/spec_decode/adaptive_verification.py:463-470",
     "Adaptive verification captures varlen decode cudagraphs, so every attention builder must "
     "report AttentionCGSupport.ALWAYS, but TRITON_ATTN reports "
     "AttentionCGSupport.UNIFORM_BATCH. Pass enable_adaptive_verification=false in the "
     "speculative config, or use a backend that does."),
    ("config/vllm.py:2424-2430,2484-2487",
     "Model Runner V2 does not yet support: adaptive verification with LoRA"),
    ("config/vllm.py:2432-2441,2484-2487",
     "Model Runner V2 does not yet support: adaptive verification with "
     "enforce_eager/cudagraph_mode=none"),
    ("config/vllm.py:2442-2450,2484-2487",
     "Model Runner V2 does not yet support: adaptive verification with pipeline parallelism"),
]
# adaptive_verification.py:237, at DEBUG only (VLLM_LOGGING_LEVEL=DEBUG): the profile ran and
# its cost tables were built; vLLM 0.28 prints nothing about it at INFO.
COST_TABLES_028 = ("(EngineCore_DP0 pid=4242) DEBUG 12-07 00:00:00 "
                   "[adaptive_verification.py:237] DSpark cost tables: (array([0.21, 0.21]), "
                   "array([0.43, 0.44, 0.45]))")


def adaptive_cfg(*extra: str):
    return smoke_cfg("+hw=h200", "hw.num_gpus=1", "model=tiny_qwen3",
                     "speculative=dspark_adaptive", *extra)


def families(group: str) -> dict[str, object]:
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("logs/vllm")
    return {p.name: p for p in compile_patterns({k: v for k, v in cfg.logs[group].items()
                                                 if v})}


@pytest.mark.parametrize(("where", "message"), REFUSALS_028, ids=[w for w, _ in REFUSALS_028])
def test_each_vllm_028_refusal_is_an_adaptive_fallback(where: str, message: str) -> None:
    line = PREFIX + message
    assert [n for n, p in families("fallbacks").items() if p.search(line)] == [
        "adaptive_refused"], where
    assert not [n for n, p in families("degraded").items() if p.search(line)]


def test_a_smoke_of_a_headless_draft_fails_naming_vllms_refusal() -> None:
    """With `checks.allow_missing_confidence_head=true` the boot goes ahead; vLLM 0.28 loads
    both models and refuses: the smoke's `fallbacks` check fails with vLLM's own words."""
    exp = expectations(adaptive_cfg())
    exp = replace(exp, adaptive=True)
    line = PREFIX + REFUSALS_028[0][1]
    log = scan_lines(["INFO 12-07 00:00:00 [model.py:1] Resolved architecture", line],
                     exp.fatal, exp.watch)
    obs = Observations(managed=True, boot=Boot(False, 60.0), log=log)
    result = check_fallbacks(exp, obs)
    assert result.status is Status.failed
    assert result.evidence.startswith("adaptive verification was asked for, but ")
    assert "needs a DSpark checkpoint with a confidence head" in result.evidence


def test_the_debug_cost_tables_line_is_cited_when_vllm_prints_it() -> None:
    exp = expectations(adaptive_cfg())
    log = scan_lines([COST_TABLES_028], exp.fatal, exp.watch)
    status, shown, data = log_evidence(exp, log)
    assert status is Status.passed and "adaptive_profiled: line 1" in shown
    assert data["evidence"]["adaptive_profiled"]["line"] == COST_TABLES_028


def counters(drafts: int, per_position: list[int], k: int) -> str:
    """/metrics as vLLM 0.28 exposes the spec-decode counters (draft tokens: drafts x K)."""
    text = (f"vllm:spec_decode_num_drafts_total {drafts}\n"
            f"vllm:spec_decode_num_draft_tokens_total {drafts * k}\n"
            f"vllm:spec_decode_num_accepted_tokens_total {sum(per_position)}\n")
    return text + "".join(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}}'
                          f" {n}\n" for i, n in enumerate(per_position))


def engaged(arm: str, per_position: list[int], drafts: int = 10, k: int = 4):
    """The smoke's `engagement` check on one request whose steps grew the counters so."""
    exp = expectations(smoke_cfg("+hw=h200", "hw.num_gpus=1", "model=tiny_qwen3",
                                 f"speculative={arm}", "speculative.num_speculative_tokens=4"))
    exp = replace(exp, steps=StepsExpect(expected_of(
        {"enable_adaptive_verification": arm == "dspark_adaptive"}, True)))
    obs = Observations(managed=True, boot=Boot(True, 1.0),
                       request=RequestOutcome(RequestState.ok, 0.5, 200, 48),
                       metrics_before=parse(counters(0, [0] * k, k)),
                       metrics_after=parse(counters(drafts, per_position, k)))
    return check_engagement(exp, obs)


def test_the_tiny_pair_is_pinned_exact() -> None:
    assert expectations(adaptive_cfg()).exact_draft is True
    assert expectations(smoke_cfg("+hw=h200", "model=tiny_qwen3")).exact_draft is True
    assert expectations(smoke_cfg("+hw=mi350x")).exact_draft is False


def test_adaptive_engaged_shows_its_varying_verify_widths() -> None:
    """10 steps of K=4: 3 kept no slot, 1 one, 2 two, 4 all four; 4 + 2*2 + 1 + 16 = 25."""
    result = engaged("dspark_adaptive", [7, 6, 4, 4])
    assert result.status is Status.passed, result.evidence
    assert result.data["outcome"] == TRIMMED and result.data["level"] == EXACT_COUNTERS
    assert result.data["widths"] == [3, 1, 2, 0, 4] and result.data["short_steps"] == 6
    assert ("adaptive verification trimmed: 6 of 10 steps proposed fewer than K=4"
            in result.evidence)
    assert "verify widths (width: steps) 0: 3, 1: 1, 2: 2, 4: 4" in result.evidence


def test_adaptive_at_a_constant_k_did_not_engage() -> None:
    result = engaged("dspark_adaptive", [10, 10, 10, 10])
    assert result.status is Status.failed and result.data["outcome"] == FULL_K
    assert "every step of the exact draft verified all K slots" in result.evidence


def test_the_fixed_arm_verifies_a_constant_k_and_an_exact_draft_loses_no_slot() -> None:
    fixed = engaged("dspark_draft", [10, 10, 10, 10])
    assert fixed.status is Status.passed and fixed.data["widths"] == [0, 0, 0, 0, 10]
    lost = engaged("dspark_draft", [10, 9, 9, 9])
    assert lost.status is Status.failed and lost.data["outcome"] == UNEXPECTED
    assert "model.expected.draft_exact" in lost.evidence


def test_counts_that_are_no_prefixes_are_not_measured() -> None:
    assert verify_widths(10, [7, 8, 4, 4]) is None
    assert verify_widths(10, [11, 6, 4, 4]) is None
    result = engaged("dspark_adaptive", [7, 8, 4, 4])
    assert result.status is Status.failed and result.data["outcome"] == "not_measured"
    assert "are no prefixes of 10 drafts" in result.evidence


def test_without_the_pin_the_counters_cannot_show_trimming() -> None:
    """A real draft (no pin) rejects slots on its own: the counters credit nothing."""
    spec = spec_decode(parse(counters(10, [7, 6, 4, 4], 4)))
    assert spec == SpecDecode(10, 40, 21, (7, 6, 4, 4))
    seen = observed([None], [], spec, 4)
    assert seen.widths is None and judge(seen, ADAPTIVE).ok is None
    assert judge(observed([None], [], spec, 4, exact=True), FIXED).outcome == UNEXPECTED


def test_the_report_recomputes_the_widths_from_the_cells_record() -> None:
    """report/evidence.py judges a cell's recorded `engagement` again, widths included; widths
    that do not count the steps are refused, not shown."""
    from dspark_cli.report.evidence import judged

    section = dict(engaged("dspark_adaptive", [7, 6, 4, 4]).data)
    again = judged(section)
    assert again.ok is True and again.outcome == TRIMMED
    assert "verify widths (width: steps) 0: 3, 1: 1, 2: 2, 4: 4" in again.sentence
    bad = judged({**section, "widths": [3, 1, 2, 0, 5]})
    assert bad.ok is False and "verify widths are not counts of the steps" in bad.sentence
