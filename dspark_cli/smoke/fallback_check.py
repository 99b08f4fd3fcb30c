"""The smoke's `fallbacks` check: lines where speculative decoding ran other than the launch
asked (`logs.fallbacks`: the V1 model runner chosen, adaptive verification refused). Reported
and passed, except where the launch asked for adaptive verification: then it did not run as
asked, and the check fails (vLLM does not fail closed on it)."""

from __future__ import annotations

from dspark_cli.server.logscan import degraded_lines
from dspark_cli.smoke.expectations import Expectations
from dspark_cli.smoke.observations import CheckResult, Observations
from dspark_cli.status import Status


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
