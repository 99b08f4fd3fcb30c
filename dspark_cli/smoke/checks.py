"""The smoke's checks and its verdict: pure functions from what was observed (`Observations`,
filled by the runner's side effects) to frozen `CheckResult`s with evidence, and the exit code
they give, so each rule is testable without a server. Every check is always reported:
`skipped` when it does not apply to this configuration, `not_run` when an earlier failure
ended the smoke first.

`engagement`: the verify steps of the smoke's requests, held to what the launch expects
(adaptive verification trims some step below K; a fixed-K drafter proposes K in every step),
read from the launch as `dspark serve` starts it: the answers' per-request metrics where the
server reports them, else the growth of /metrics' spec-decode counters
(`metrics.observed`; for a draft pinned exact, the verify widths its per-position acceptance
gives: vLLM 0.28 has no per-request metrics).

`fallbacks`: lines where speculative decoding ran other than the launch asked
(`logs.fallbacks`: the V1 model runner chosen, adaptive verification refused). Reported and
passed, except where the launch asked for adaptive verification: then it did not run as asked,
and the check fails (vLLM does not fail closed on it).

The log evidence: for each `logs.evidence` family (a line that shows an asked-for feature ran:
breakable CUDA graphs, the ROCm indexer's flattened path), whether this profile expects it and
the line that showed it. A missing expected line fails the smoke through `startup_lines` (it is
one of them); this only shows it.

Exit codes (README "Exit codes"): 0 every check passed or did not apply; 3 the server failed to
start or stay healthy (the `health`, `server_alive` or `liveness` check failed: a stall is a
server that stopped generating); 1 any other check failed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dspark_cli.compat import StrEnum
from dspark_cli.config.choices import DraftTokensRule
from dspark_cli.errors import ExitCode
from dspark_cli.server.logscan import LogSnapshot, degraded_lines, seen_params
from dspark_cli.server.metrics import (
    GENERATION_TOKENS,
    NOT_MEASURED,
    Engagement,
    RequestSteps,
    Scrape,
    engine_tokens,
    judge,
    observed,
    spec_decode,
)
from dspark_cli.smoke.expectations import Expectations
from dspark_cli.status import Status


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    evidence: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status is Status.failed

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "evidence": self.evidence,
                "data": dict(self.data)}


class RequestState(StrEnum):
    ok = "ok"  # HTTP 200 with a usage block
    http_error = "http_error"
    transport_error = "transport_error"  # connection refused/reset: the server went away
    timeout = "timeout"  # no response within the request timeout: a queue hang
    interrupted = "interrupted"  # a fatal line or the server's death ended the wait
    not_run = "not_run"


@dataclass(frozen=True)
class Boot:
    healthy: bool
    seconds: float | None  # launch (or attach) -> first /health 200
    failure: str | None = None


@dataclass(frozen=True)
class RequestOutcome:
    state: RequestState
    latency_s: float | None = None
    http_status: int | None = None
    completion_tokens: int | None = None
    detail: str = ""
    # vLLM's per-request spec-decode metrics of each answer (None: the answer had none) and
    # why an answer's were malformed (`server/metrics.py`).
    spec_steps: tuple[RequestSteps | None, ...] = ()
    spec_problems: tuple[str, ...] = ()


NOT_RUN = RequestOutcome(RequestState.not_run)


@dataclass(frozen=True)
class Observations:
    """Everything the runner saw; None where a phase never happened."""

    managed: bool
    boot: Boot
    request: RequestOutcome = NOT_RUN
    # Managed: the exit code if the server died on its own before the verdict.
    exit_code: int | None = None
    died_during: str | None = None
    # Managed on a cluster engine: why the deployment ended on its own before the verdict
    # ("Slurm job 12 FAILED"); `cluster` says the server was such a deployment.
    ended: str | None = None
    cluster: bool = False
    # What ended the smoke early ("fatal log line", "server exited"), if anything did.
    stopped_by: str | None = None
    metrics_before: Scrape | None = None
    metrics_after: Scrape | None = None
    metrics_error: str | None = None
    # Attached: /health after the request (None when not probed).
    final_health: bool | None = None
    log: LogSnapshot | None = None
    # The stall watch tripped (`server/liveness.py`): its counters and the log's last lines.
    stall: Mapping[str, Any] | None = None


def not_run(name: str, obs: Observations) -> CheckResult:
    why = obs.stopped_by or ("the server never became healthy" if not obs.boot.healthy
                             else "an earlier failure")
    return CheckResult(name, Status.not_run, f"not run: {why}")


def log_evidence(exp: Expectations, log: LogSnapshot | None) -> tuple[Status, str, dict[str, Any]]:
    """(status, evidence, data) of the `log_evidence` check."""
    if log is None:
        return Status.skipped, "no server log", {}
    if not exp.evidence:
        return Status.skipped, "no evidence families configured (logs.evidence)", {}
    families: dict[str, dict[str, Any]] = {}
    shown = []
    for p in exp.evidence:
        m = log.found.get(p.name)
        expected = p.name in exp.expected_evidence
        families[p.name] = {"expected": expected, "line_no": m.line_no if m else None,
                            "line": m.line.strip() if m else None}
        if m:
            shown.append(f"{p.name}: line {m.line_no}" + ("" if expected else " (not expected)"))
        else:
            shown.append(f"{p.name}: {'EXPECTED' if expected else 'not expected'}, not seen")
    return Status.passed, "; ".join(shown), {"evidence": families}


NAME = "engagement"


def engagement(exp: Expectations, obs: Observations) -> Engagement | None:
    """What the requests' steps showed (None when there were no answers to read)."""
    if exp.steps is None or obs.request.state is not RequestState.ok:
        return None
    req = obs.request
    counters = (None if obs.metrics_before is None or obs.metrics_after is None
                else spec_decode(obs.metrics_after.delta(obs.metrics_before)))
    return observed(req.spec_steps or (None,) * exp.requests, req.spec_problems, counters,
                    exp.spec.k if exp.spec else None, exp.exact_draft)


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


def check_fallbacks(exp: Expectations, obs: Observations) -> CheckResult:
    if obs.log is None:
        return CheckResult("fallbacks", Status.skipped, "no server log")
    lines = list(degraded_lines(obs.log, exp.fallbacks))
    data = {"lines": lines, "adaptive": exp.adaptive}
    if not lines:
        return CheckResult("fallbacks", Status.passed, "speculative decoding ran as asked "
                           f"({len(exp.fallbacks)} fallback families watched)", data)
    more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
    if exp.adaptive:
        return CheckResult("fallbacks", Status.failed, "adaptive verification was asked for, "
                           f"but {lines[0].strip()}{more}", data)
    return CheckResult("fallbacks", Status.passed, f"FALLBACK: {lines[0].strip()}{more}", data)


def check_health(exp: Expectations, obs: Observations) -> CheckResult:
    if obs.boot.healthy:
        return CheckResult("health", Status.passed,
                           f"/health 200 after {obs.boot.seconds:.1f} s",
                           {"seconds": obs.boot.seconds})
    return CheckResult("health", Status.failed, obs.boot.failure or "/health never answered 200")


def check_alive(exp: Expectations, obs: Observations) -> CheckResult:
    if obs.exit_code is not None:
        return CheckResult("server_alive", Status.failed,
                           f"the server exited with code {obs.exit_code} "
                           f"during {obs.died_during or 'the smoke'}",
                           {"exit_code": obs.exit_code, "phase": obs.died_during})
    if obs.ended is not None:
        return CheckResult("server_alive", Status.failed,
                           f"{obs.ended} during {obs.died_during or 'the smoke'}",
                           {"ended": obs.ended, "phase": obs.died_during})
    if not obs.boot.healthy:
        return not_run("server_alive", obs)
    if obs.cluster:
        return CheckResult("server_alive", Status.passed, "the deployment ran until teardown")
    if obs.managed:
        return CheckResult("server_alive", Status.passed, "the process group was alive until "
                           "teardown")
    if obs.final_health is None:
        return not_run("server_alive", obs)
    if obs.final_health:
        return CheckResult("server_alive", Status.passed, "/health 200 after the request")
    return CheckResult("server_alive", Status.failed, "/health did not answer 200 after the "
                       "request")


def check_liveness(exp: Expectations, obs: Observations) -> CheckResult:
    """Requests in the engine kept generating: the stall watch (`watch.stall_s`) did not trip
    while /health kept answering."""
    if obs.stall is not None:
        return CheckResult("liveness", Status.failed, str(obs.stall.get("sentence", "stalled")),
                           dict(obs.stall))
    if exp.stall_s is None:
        return CheckResult("liveness", Status.skipped, "the stall watch is off (watch.stall_s)")
    if not obs.boot.healthy:
        return not_run("liveness", obs)
    return CheckResult("liveness", Status.passed,
                       f"no stall: tokens grew whenever requests ran (watch.stall_s="
                       f"{exp.stall_s:g})", {"stall_s": exp.stall_s})


def check_startup_lines(exp: Expectations, obs: Observations) -> CheckResult:
    if obs.log is None:
        return CheckResult("startup_lines", Status.skipped, "no server log (attached without "
                           "server.log=FILE)")
    found = {p.name: obs.log.found.get(p.name) for p in exp.required}
    data = {name: (m.line_no if m else None) for name, m in found.items()}
    missing = [name for name, m in found.items() if m is None]
    if not missing:
        shown = ", ".join(f"{name!r} (line {m.line_no})" for name, m in found.items() if m)
        return CheckResult("startup_lines", Status.passed, f"seen: {shown}", data)
    if not obs.boot.healthy:
        return not_run("startup_lines", obs)
    return CheckResult("startup_lines", Status.failed,
                       "missing: " + ", ".join(repr(name) for name in missing), data)


def check_draft_params(exp: Expectations, obs: Observations) -> CheckResult:
    spec = exp.draft_params
    if spec is None:
        return CheckResult("draft_params", Status.skipped,
                           "no DSpark draft with a pinned parameter count "
                           "(model.expected.draft_params)")
    if obs.log is None:
        return CheckResult("draft_params", Status.skipped, "no server log")
    seen = seen_params(spec, obs.log)
    if seen["params"] is None and not obs.boot.healthy:
        return not_run("draft_params", obs)
    data = {k: seen[k] for k in ("params", "expected", "line")} if seen["params"] is not None \
        else {}
    return CheckResult("draft_params", Status.passed if seen["ok"] else Status.failed,
                       seen["sentence"], data)


def check_no_fatal(exp: Expectations, obs: Observations) -> CheckResult:
    if obs.log is None:
        return CheckResult("no_fatal_lines", Status.skipped, "no server log")
    families = [p.name for p in exp.fatal]  # what a pass rules out
    if not obs.log.fatal:
        return CheckResult("no_fatal_lines", Status.passed,
                           f"no fatal line in {obs.log.lines_read} log lines",
                           {"lines": obs.log.lines_read, "families": families})
    first = obs.log.fatal[0]
    events = [{"pattern": e.pattern, "line_no": e.line_no, "line": e.line,
               "context": list(e.context)} for e in obs.log.fatal]
    more = f" (+{len(events) - 1} more)" if len(events) > 1 else ""
    return CheckResult("no_fatal_lines", Status.failed,
                       f"{first.pattern} at log line {first.line_no}: {first.line.strip()}{more}",
                       {"events": events, "families": families})


def check_overrides(exp: Expectations, obs: Observations) -> CheckResult:
    """Lines where vLLM overrode what was asked (a cudagraph downgrade, a kernel fallback):
    a performance downgrade, not a fault, so reported and passed."""
    if obs.log is None:
        return CheckResult("overrides", Status.skipped, "no server log")
    lines = degraded_lines(obs.log, exp.degraded)
    if not lines:
        return CheckResult("overrides", Status.passed, "vLLM overrode nothing that was asked "
                           f"({len(exp.degraded)} families watched)", {"lines": []})
    more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
    return CheckResult("overrides", Status.passed, f"DEGRADED: vLLM overrode what was asked: "
                       f"{lines[0].strip()}{more}", {"lines": list(lines)})


def check_log_evidence(exp: Expectations, obs: Observations) -> CheckResult:
    return CheckResult("log_evidence", *log_evidence(exp, obs.log))


def check_request(exp: Expectations, obs: Observations) -> CheckResult:
    req = obs.request
    if req.state is RequestState.ok:
        return CheckResult("request", Status.passed,
                           f"HTTP 200 in {req.latency_s:.2f} s", {"latency_s": req.latency_s})
    if req.state is RequestState.timeout:
        return CheckResult("request", Status.failed,
                           f"queue hang: no response within {exp.request_timeout_s:.0f} s "
                           "(smoke.request_timeout_s)", {"timeout_s": exp.request_timeout_s})
    if req.state in (RequestState.not_run, RequestState.interrupted):
        return not_run("request", obs)
    return CheckResult("request", Status.failed, req.detail or req.state.value,
                       {"http_status": req.http_status})


def check_generation(exp: Expectations, obs: Observations) -> CheckResult:
    req, n = obs.request, exp.max_tokens * exp.requests
    if req.state is not RequestState.ok:
        return not_run("generation", obs)
    if obs.metrics_before is None or obs.metrics_after is None:
        return CheckResult("generation", Status.failed,
                           f"usage {req.completion_tokens} of {n} tokens; server counter "
                           f"unreadable: {obs.metrics_error}")
    counted = round(obs.metrics_after.delta(obs.metrics_before).total(GENERATION_TOKENS))
    data = {"requested": n, "usage": req.completion_tokens, "server_counter_delta": counted}
    if req.completion_tokens == n == counted:
        over = f" over {exp.requests} requests" if exp.requests > 1 else ""
        return CheckResult("generation", Status.passed,
                           f"{n} tokens{over} (usage {n}, vllm:generation_tokens +{counted})",
                           data)
    return CheckResult("generation", Status.failed,
                       f"asked for {n} tokens: usage says {req.completion_tokens}, "
                       f"vllm:generation_tokens grew by {counted}", data)


def check_engines(exp: Expectations, obs: Observations) -> CheckResult:
    """Every data parallel engine generated tokens for the smoke's requests."""
    if exp.engines == 1:
        return CheckResult("engines", Status.skipped, "one engine")
    if obs.request.state is not RequestState.ok:
        return not_run("engines", obs)
    if obs.metrics_before is None or obs.metrics_after is None:
        return CheckResult("engines", Status.failed, f"/metrics unreadable: {obs.metrics_error}")
    grown = engine_tokens(obs.metrics_after.delta(obs.metrics_before))
    per_engine = {str(e): grown.get(str(e), 0) for e in range(exp.engines)}
    data = {"engines": exp.engines, "generation_tokens": per_engine}
    shown = ", ".join(f"engine {e} +{t}" for e, t in per_engine.items())
    idle = [e for e, t in per_engine.items() if t <= 0]
    if idle:
        return CheckResult("engines", Status.failed,
                           f"engines {', '.join(idle)} generated nothing ({shown}): not every "
                           "data parallel engine serves", data)
    return CheckResult("engines", Status.passed,
                       f"all {exp.engines} engines generated ({shown})", data)


def spec_problems(drafts: int, draft_tokens: int, accepted: int, k: int | None,
                  rule: DraftTokensRule) -> list[str]:
    """The spec-decode invariants that these counters break (empty: all hold)."""
    problems = []
    if drafts <= 0:
        problems.append("no drafts: speculative decoding did not run")
    if k is not None and rule is DraftTokensRule.exact and draft_tokens != drafts * k:
        problems.append(f"draft tokens {draft_tokens} != drafts x K = {drafts} x {k}")
    if k is not None and rule is DraftTokensRule.at_most and draft_tokens > drafts * k:
        problems.append(f"draft tokens {draft_tokens} > drafts x K = {drafts} x {k}")
    if accepted > draft_tokens:
        problems.append(f"accepted {accepted} > draft tokens {draft_tokens}")
    return problems


def check_spec_decode(exp: Expectations, obs: Observations) -> CheckResult:
    if exp.spec is None:
        return CheckResult("spec_decode", Status.skipped, "no speculative decoding configured")
    if obs.request.state is not RequestState.ok:
        return not_run("spec_decode", obs)
    if obs.metrics_before is None or obs.metrics_after is None:
        return CheckResult("spec_decode", Status.failed,
                           f"/metrics unreadable: {obs.metrics_error}")
    counters = spec_decode(obs.metrics_after.delta(obs.metrics_before))
    if counters is None:
        return CheckResult("spec_decode", Status.failed,
                           f"{exp.spec.method} is configured, but /metrics has no "
                           "vllm:spec_decode_* counters")
    k, rule = exp.spec.k, exp.spec.rule
    data = {**counters.as_dict(), "k": k, "rule": rule.value}
    problems = spec_problems(counters.drafts, counters.draft_tokens, counters.accepted, k, rule)
    if problems:
        return CheckResult("spec_decode", Status.failed, "; ".join(problems), data)
    relation = "=" if rule is DraftTokensRule.exact else "<="
    shown_k = f"{counters.drafts} x K={k}" if k is not None else "K unknown"
    return CheckResult(
        "spec_decode", Status.passed,
        f"{counters.drafts} drafts, {counters.draft_tokens} draft tokens ({relation} {shown_k}), "
        f"{counters.accepted} accepted; acceptance rate {data['acceptance_rate']}, "
        f"mean acceptance length {data['mean_acceptance_length']}", data)


CHECKS = (check_health, check_alive, check_liveness, check_startup_lines, check_draft_params,
          check_no_fatal, check_overrides, check_fallbacks, check_log_evidence, check_request,
          check_generation, check_engines, check_spec_decode, check_engagement)


def evaluate(exp: Expectations, obs: Observations) -> tuple[CheckResult, ...]:
    """Every check's result, in report order."""
    return tuple(check(exp, obs) for check in CHECKS)


SERVER_CHECKS = ("health", "server_alive", "liveness")


@dataclass(frozen=True)
class Verdict:
    passed: bool
    exit_code: ExitCode
    summary: str


def decide(results: Sequence[CheckResult]) -> Verdict:
    failed = [r for r in results if r.failed]
    if not failed:
        return Verdict(True, ExitCode.OK, f"{len(results)} checks, none failed")
    server = [r for r in failed if r.name in SERVER_CHECKS]
    first = (server or failed)[0]
    code = ExitCode.SERVER if server else ExitCode.CHECK_FAILED
    names = ", ".join(r.name for r in failed)
    return Verdict(False, code, f"{names} failed: {first.evidence}")
