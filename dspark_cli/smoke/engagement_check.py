"""The smoke's `engagement` check: vLLM's own per-request speculative-decoding metrics of the
smoke's answers, held to what the launch expects (adaptive verification trims some step below
K; a fixed-K drafter proposes K in every step). Pure, like the other checks."""

from __future__ import annotations

from dspark_cli.server.spec_metrics import NOT_MEASURED, Engagement, judge
from dspark_cli.smoke.expectations import Expectations
from dspark_cli.smoke.observations import CheckResult, Observations, RequestState, not_run
from dspark_cli.status import Status

NAME = "engagement"


def engagement(exp: Expectations, obs: Observations) -> Engagement | None:
    """What the answers' metrics showed (None when there were no answers to read)."""
    if exp.steps is None or obs.request.state is not RequestState.ok:
        return None
    req, ask = obs.request, exp.steps.ask
    level = ask.level
    if level is None and any(s is not None for s in req.spec_steps):
        level = "as the server was started"  # attached to a server that reports them
    return Engagement.of(level, req.spec_steps, req.spec_problems, ask.why)


def check_engagement(exp: Expectations, obs: Observations) -> CheckResult:
    if exp.spec is None or exp.steps is None:
        return CheckResult(NAME, Status.skipped, "no speculative decoding configured")
    seen = engagement(exp, obs)
    if seen is None:
        return not_run(NAME, obs)
    verdict = judge(seen, exp.steps.expected)
    data = {**seen.to_dict(), "asked": exp.steps.ask.to_dict(), "expected": exp.steps.expected,
            "outcome": verdict.outcome}
    if verdict.ok is None:
        return CheckResult(NAME, Status.skipped, f"not shown: {verdict.sentence}", data)
    if verdict.outcome == NOT_MEASURED or not verdict.ok:
        return CheckResult(NAME, Status.failed, verdict.sentence, data)
    return CheckResult(NAME, Status.passed, verdict.sentence, data)
