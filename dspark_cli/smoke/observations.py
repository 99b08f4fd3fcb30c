"""What the smoke observed, as values: the runner (side effects) fills `Observations`, the
checks judge it into `CheckResult`s. Kept apart from the rules so that a check of its own module
(`engagement_check.py`) and the rules in `checks.py` share them without a cycle."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dspark_cli.compat import StrEnum
from dspark_cli.server.logscan import LogSnapshot
from dspark_cli.server.metrics import RequestSteps, Scrape
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
