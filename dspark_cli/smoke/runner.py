"""Run the smoke over a server session: the side effects (HTTP, the log, teardown).

Every wait races the server: a fatal log line or the process exiting ends it at once (the
watcher signals within ~20 ms, the session's wait between health polls ends on it or on the
process's exit), so a broken server gets its verdict within a second instead of at a timeout.
What was seen goes into `Observations`; the pure checks in `checks.py` judge it. The session
tears a managed server down on every path.

The slow checks run beside the boot, and calls raced against the server's life, are here too
(`BackgroundCheck`, `race`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dspark_cli.console import progress
from dspark_cli.errors import ServerError
from dspark_cli.server.http import exchange
from dspark_cli.server.logscan import LogSnapshot
from dspark_cli.server.metrics import Scrape, ScrapeError, request_steps
from dspark_cli.server.process import Teardown
from dspark_cli.smoke.checks import (
    Boot,
    CheckResult,
    Observations,
    RequestOutcome,
    RequestState,
    Verdict,
    decide,
    evaluate,
)
from dspark_cli.smoke.expectations import Expectations
from dspark_cli.status import Status

if TYPE_CHECKING:  # the live session and its HTTP stack load when a smoke runs, not when planned
    import httpx

    from dspark_cli.server.session import ServerSession

POLL_S = 0.02


def in_thread(fn: Callable[[], Any], name: str) -> futures.Future[Any]:
    """`fn()` in a daemon thread, as a Future. Not an executor: its threads are joined at exit,
    and an abandoned call (a server that never answers) must end with the process."""
    future: futures.Future[Any] = futures.Future()

    def target() -> None:
        try:
            future.set_result(fn())
        except Exception as exc:  # reported to whoever reads the future
            future.set_exception(exc)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


class BackgroundCheck:
    """A slow pre-launch check run beside the boot instead of before it (vLLM's own parser
    takes 5-10 s on 2 cores); a rejection stops the boot as a fatal line would."""

    def __init__(self, name: str, fn: Callable[[], tuple[bool, str]]) -> None:
        self.name = name
        self._future = in_thread(fn, f"dspark-{name}")

    def _outcome(self) -> tuple[bool, str]:
        """(passed, message), waiting for the check; a crashed check proves nothing: failed."""
        exc = self._future.exception()
        return (False, f"{type(exc).__name__}: {exc}") if exc else self._future.result()

    def rejection(self) -> str | None:
        """The failure message once the check has failed; None while running or passed."""
        if not self._future.done():
            return None
        ok, message = self._outcome()
        return None if ok else message

    def result(self) -> CheckResult:
        ok, message = self._outcome()
        return CheckResult(self.name, Status.passed if ok else Status.failed, message)


def race(fn: Callable[[], Any], timeout: float,
         interrupt: Callable[[], str | None]) -> tuple[str, Any]:
    """Run `fn` in a thread; ("done", value) | ("error", exc) | ("interrupted", reason) |
    ("timeout", None), whichever comes first. An abandoned call ends with the server."""
    future = in_thread(fn, "dspark-smoke-call")
    deadline = time.monotonic() + timeout
    while not futures.wait([future], POLL_S).done:
        reason = interrupt()
        if reason:
            return "interrupted", reason
        if time.monotonic() > deadline:
            return "timeout", None
    exc = future.exception()
    return ("error", exc) if exc else ("done", future.result())


LOG_SETTLE_S = 0.2  # the server's last lines reach the log file a moment after it answers
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Timings:
    boot_to_health_s: float | None
    request_latency_s: float | None
    start_to_verdict_s: float
    after_health_to_verdict_s: float | None
    fatal_to_verdict_s: float | None
    teardown_s: float | None
    total_s: float

    def to_dict(self) -> dict[str, float | None]:
        return {k: None if v is None else round(v, 3) for k, v in vars(self).items()}


@dataclass(frozen=True)
class SmokeRun:
    results: tuple[CheckResult, ...]
    verdict: Verdict
    observations: Observations
    timings: Timings
    decided_at: float  # time.time() when the verdict was taken (before teardown)
    teardown: Teardown | None
    server_version: str | None


def complete(client: httpx.Client, base_url: str, model: str, prompt: str, max_tokens: int,
             timeout: float) -> RequestOutcome:
    """One greedy completion of exactly `max_tokens` tokens (ignore_eos) through the session's
    `client`, judged by HTTP only."""
    import httpx

    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    start = time.monotonic()
    try:
        r = exchange(client, "POST", base_url + "/v1/completions", json=body,
                     deadline_s=timeout, connect_s=CONNECT_TIMEOUT_S)
    except httpx.TimeoutException:
        return RequestOutcome(RequestState.timeout, detail="no response")
    except httpx.HTTPError as exc:
        return RequestOutcome(RequestState.transport_error,
                              detail=f"connection error: {type(exc).__name__}: {exc}")
    latency = time.monotonic() - start
    if r.status_code != 200:
        return RequestOutcome(RequestState.http_error, latency, r.status_code,
                              detail=f"HTTP {r.status_code}: {r.text.strip()[:300]}")
    try:
        body = r.json()
        tokens = int(body["usage"]["completion_tokens"])
    except (ValueError, KeyError, TypeError):
        return RequestOutcome(RequestState.http_error, latency, 200,
                              detail="HTTP 200 without usage.completion_tokens")
    try:
        return RequestOutcome(RequestState.ok, latency, 200, tokens,
                              spec_steps=(request_steps(body),))
    except ValueError as exc:
        return RequestOutcome(RequestState.ok, latency, 200, tokens, spec_problems=(str(exc),))


def complete_all(client: httpx.Client, base_url: str, model: str, prompt: str,
                 max_tokens: int, timeout: float, count: int) -> RequestOutcome:
    """`count` completions at once (so a data parallel server spreads them over its engines),
    as one outcome: ok when every one is, the first failure otherwise; tokens summed, latency
    the slowest."""
    if count == 1:
        return complete(client, base_url, model, prompt, max_tokens, timeout)
    with futures.ThreadPoolExecutor(count) as pool:
        outcomes = list(pool.map(lambda i: complete(client, base_url, model, f"{prompt} {i}",
                                                    max_tokens, timeout), range(count)))
    failed = [o for o in outcomes if o.state is not RequestState.ok]
    if failed:
        return failed[0]
    return RequestOutcome(RequestState.ok, max(o.latency_s or 0.0 for o in outcomes), 200,
                          sum(o.completion_tokens or 0 for o in outcomes),
                          spec_steps=tuple(s for o in outcomes for s in o.spec_steps),
                          spec_problems=tuple(p for o in outcomes for p in o.spec_problems))


class _Smoke:
    """One smoke's observations, gathered through its session."""

    def __init__(self, exp: Expectations, session: ServerSession, model: str) -> None:
        self.exp, self.session, self.model = exp, session, model

    def boot(self) -> Boot:
        where = ("the head's /health once the deployment runs" if self.session.deployment.queued
                 else f"{self.session.base_url}/health")
        progress(f"waiting for {where} (up to {self.session.watch.ready_timeout_s:.0f} s: "
                 "server.ready_timeout_s)")
        try:
            return Boot(True, self.session.wait_healthy())
        except ServerError as exc:
            return Boot(False, None, exc.reason)

    def request(self) -> tuple[str, RequestOutcome]:
        exp = self.exp
        many = f"{exp.requests} requests at once (for {exp.engines} engines), each of " if (
            exp.requests > 1) else ""
        progress(f"requesting {many}{exp.max_tokens} tokens")
        kind, value = race(
            lambda: complete_all(self.session.http, self.session.base_url, self.model, exp.prompt,
                                 exp.max_tokens, exp.request_timeout_s, exp.requests),
            exp.request_timeout_s, self.session.stop_reason)
        outcomes = {"timeout": RequestOutcome(RequestState.timeout, detail="no response"),
                    "interrupted": RequestOutcome(RequestState.interrupted, detail=str(value)),
                    "error": RequestOutcome(RequestState.transport_error, detail=str(value))}
        return kind, value if kind == "done" else outcomes[kind]

    def request_phase(self, obs: Observations) -> Observations:
        before: Scrape | None = None
        try:
            before = self.session.scrape()
        except ScrapeError as exc:
            obs = replace(obs, metrics_error=str(exc))
        kind, request = self.request()
        transport = request.state is RequestState.transport_error
        code = self.session.exit_code(0.5 if transport else 0.0)
        if code is not None:
            return replace(obs, request=RequestOutcome(RequestState.interrupted),
                           exit_code=code, died_during="the request",
                           stopped_by=f"the server exited with code {code}")
        ended = self._ended(1.0 if transport else 0.0)
        if ended is not None:
            return replace(obs, request=RequestOutcome(RequestState.interrupted), ended=ended,
                           died_during="the request", stopped_by=ended)
        if kind == "interrupted":
            return replace(obs, request=request, stopped_by=request.detail,
                           stall=self.session.stall_evidence())
        obs = replace(obs, request=request, metrics_before=before)
        if request.state is RequestState.ok and before is not None:
            try:
                after = self.session.scrape_settled(before, request.completion_tokens or 0)
                obs = replace(obs, metrics_after=after)
            except ScrapeError as exc:
                obs = replace(obs, metrics_error=str(exc))
        if not self.session.managed:
            obs = replace(obs, final_health=self.session.healthy())
        return obs

    def _ended(self, wait_s: float = 0.0) -> str | None:
        """Why the cluster deployment no longer runs (None: it runs, or it is not one);
        `wait_s` gives the engine time to notice an end a dropped connection announced."""
        cluster = self.session.deployment
        if not cluster.queued:
            return None
        deadline = time.monotonic() + wait_s
        while (ended := cluster.ended()) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return ended

    def observe(self) -> Observations:
        obs = Observations(managed=self.session.managed, boot=self.boot(),
                           cluster=self.session.deployment.queued)
        if not obs.boot.healthy:
            code, ended = self.session.exit_code(), self._ended()
            return replace(obs, exit_code=code, ended=ended,
                           died_during="boot" if code is not None or ended else None,
                           stopped_by=self.session.stop_reason())
        progress(f"healthy after {obs.boot.seconds:.1f} s")
        return self.request_phase(obs)


def teardown_check(teardown: Teardown | None) -> CheckResult:
    if teardown is None:
        return CheckResult("teardown", Status.skipped, "attached: the server is not ours to stop")
    data = teardown.to_dict()
    if teardown.clean and teardown.deployment is not None:
        return CheckResult("teardown", Status.passed,
                           f"{teardown.signal}: {teardown.deployment} left the queue, nothing "
                           f"left behind, the head's port free after {teardown.seconds:.1f} s",
                           data)
    if teardown.clean:
        return CheckResult("teardown", Status.passed,
                           f"{teardown.signal}: no process left, port free after "
                           f"{teardown.seconds:.1f} s", data)
    problems = ([f"processes {list(teardown.leftover_pids)} left"] if teardown.leftover_pids
                else []) + ([] if teardown.port_free else ["the port is still in use"])
    if not teardown.deployment_gone:
        problems.append(f"{teardown.deployment} is still in the queue")
    return CheckResult("teardown", Status.failed, "; ".join(problems), data)


def validation_check(validation: BackgroundCheck | None, session: ServerSession) -> CheckResult:
    if validation is not None:
        return validation.result()
    why = ("the command runs on the cluster's nodes: `dspark serve deploy=... --dry-run "
           "--validate` checks it with this host's vLLM" if session.deployment.queued
           else "server.command replaces the planned vLLM command" if session.managed
           else "attached: the command is not ours")
    return CheckResult("vllm_accepts_command", Status.skipped, why)


def run_smoke(exp: Expectations, session: ServerSession, model: str,
              validation: BackgroundCheck | None = None) -> SmokeRun:
    """Boot (managed) or reach (attached) the server, check it, and tear it down."""
    smoke = _Smoke(exp, session, model)
    started = time.monotonic()
    version: str | None = None
    with session:
        if session.managed:
            progress(f"started the server; log: {session.log_path}")
        obs = smoke.observe()
        if session.watcher is not None and not session.watcher.fired.is_set():
            time.sleep(LOG_SETTLE_S)  # lines printed just before (e.g. with an HTTP 500)
        at_verdict = session.log_snapshot()
        decided_at, decided = time.time(), time.monotonic()
        validated = validation_check(validation, session)
        preliminary = decide((validated, *evaluate(exp, _with_log(obs, at_verdict, at_verdict))))
        progress(f"verdict: {'PASS' if preliminary.passed else 'FAIL'}: {preliminary.summary}")
        if obs.boot.healthy and not session.stop_reason():
            version = session.version()
    teardown = session.teardown
    obs = _with_log(obs, session.final_log, at_verdict)
    results = (validated, *evaluate(exp, obs), teardown_check(teardown))
    timings = Timings(
        boot_to_health_s=obs.boot.seconds,
        request_latency_s=obs.request.latency_s,
        start_to_verdict_s=decided - started,
        after_health_to_verdict_s=(decided - started - obs.boot.seconds
                                   if obs.boot.seconds is not None else None),
        fatal_to_verdict_s=(decided_at - obs.log.fatal[0].detected_at
                            if obs.log is not None and obs.log.fatal else None),
        teardown_s=teardown.seconds if teardown is not None else None,
        total_s=time.monotonic() - started,
    )
    return SmokeRun(results, decide(results), obs, timings, decided_at, teardown, version)


def _with_log(obs: Observations, snapshot: LogSnapshot | None,
              at_verdict: LogSnapshot | None) -> Observations:
    """The log as it was at the verdict (teardown noise excluded), with later context lines."""
    if snapshot is None or at_verdict is None:
        return obs
    return replace(obs, log=snapshot.upto(at_verdict.lines_read))
