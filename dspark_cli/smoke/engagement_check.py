"""The smoke's `engagement` check: the verify steps of the smoke's requests, held to what the
launch expects (adaptive verification trims some step below K; a fixed-K drafter proposes K in
every step), read from the launch as `dspark serve` starts it: the answers' per-request metrics
where the server reports them, else the growth of /metrics' spec-decode counters
(`metrics.observed`). Pure, like the other checks."""

from __future__ import annotations

from dspark_cli.server.metrics import NOT_MEASURED, Engagement, judge, observed, spec_decode
from dspark_cli.smoke.expectations import Expectations
from dspark_cli.smoke.observations import CheckResult, Observations, RequestState, not_run
from dspark_cli.status import Status

NAME = "engagement"


def engagement(exp: Expectations, obs: Observations) -> Engagement | None:
    """What the requests' steps showed (None when there were no answers to read)."""
    if exp.steps is None or obs.request.state is not RequestState.ok:
        return None
    req = obs.request
    counters = (None if obs.metrics_before is None or obs.metrics_after is None
                else spec_decode(obs.metrics_after.delta(obs.metrics_before)))
    return observed(req.spec_steps or (None,) * exp.requests, req.spec_problems, counters,
                    exp.spec.k if exp.spec else None)


def check_engagement(exp: Expectations, obs: Observations) -> CheckResult:
    if exp.spec is None or exp.steps is None:
        return CheckResult(NAME, Status.skipped, "no speculative decoding configured")
    seen = engagement(exp, obs)
    if seen is None:
        return not_run(NAME, obs)
    verdict = judge(seen, exp.steps.expected)
    data = {**seen.to_dict(), "expected": exp.steps.expected, "outcome": verdict.outcome}
    if verdict.ok is None:
        return CheckResult(NAME, Status.skipped, f"not shown: {verdict.sentence}", data)
    if verdict.outcome == NOT_MEASURED or not verdict.ok:
        return CheckResult(NAME, Status.failed, verdict.sentence, data)
    return CheckResult(NAME, Status.passed, verdict.sentence, data)
