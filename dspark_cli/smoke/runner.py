"""Run the smoke against a server: the side effects (HTTP, the log watcher, teardown).

Every wait races the server: a fatal log line or the process exiting ends it at once (the
watcher signals within ~20 ms, the process is polled every 20 ms), so a broken server gets its
verdict within a second instead of at a timeout. What was seen goes into `Observations`; the
pure checks in `checks.py` judge it. A managed server is torn down on every path.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from dspark_cli.errors import ServerError
from dspark_cli.server.logscan import LogSnapshot, LogWatcher, Pattern
from dspark_cli.server.metrics import GENERATION_TOKENS, Scrape, ScrapeError, scrape
from dspark_cli.server.process import HEALTH_PROBE_TIMEOUT_S, ServerProcess, Teardown
from dspark_cli.smoke.checks import (
    Boot,
    CheckResult,
    Observations,
    RequestOutcome,
    RequestState,
    Status,
    evaluate,
)
from dspark_cli.smoke.expectations import Expectations
from dspark_cli.smoke.verdict import Verdict, decide

POLL_S = 0.02
HEALTH_POLL_S = 0.1
LOG_SETTLE_S = 0.2  # the server's last lines reach the log file a moment after it answers
METRICS_SETTLE_S = 2.0  # vLLM may record a request's counters just after answering it
CONNECT_TIMEOUT_S = 5.0


class BackgroundCheck:
    """A slow pre-launch check run beside the boot instead of before it (vLLM's own parser
    takes 5-10 s on 2 cores); a rejection stops the boot as a fatal line would."""

    def __init__(self, name: str, fn: Callable[[], tuple[bool, str]]) -> None:
        self.name = name
        self._box: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(fn,), name=f"dspark-{name}",
                                        daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], tuple[bool, str]]) -> None:
        try:
            self._box["result"] = fn()
        except Exception as exc:  # a crashed check proves nothing: fail closed
            self._box["result"] = (False, f"{type(exc).__name__}: {exc}")

    def rejection(self) -> str | None:
        """The failure message once the check has failed; None while running or passed."""
        ok, message = self._box.get("result", (True, ""))
        return None if ok else message

    def result(self) -> CheckResult:
        self._thread.join()
        ok, message = self._box["result"]
        return CheckResult(self.name, Status.passed if ok else Status.failed, message)


@dataclass(frozen=True)
class Target:
    """Where the server is and how to reach it."""

    base_url: str
    model: str  # served model name, for the request
    log_path: Path | None
    ready_timeout_s: float
    stop_grace_s: float = 15.0
    server: ServerProcess | None = None  # None: attached (not ours to start or stop)
    validation: BackgroundCheck | None = None  # None: nothing to validate (reported skipped)


@dataclass(frozen=True)
class SmokeRun:
    results: tuple[CheckResult, ...]
    verdict: Verdict
    observations: Observations
    timings: dict[str, float | None]
    decided_at: float  # time.time() when the verdict was taken (before teardown)
    teardown: Teardown | None
    server_version: str | None


def progress(message: str) -> None:
    print(f"dspark: {message}", file=sys.stderr, flush=True)


def race(fn: Callable[[], Any], timeout: float,
         interrupt: Callable[[], str | None]) -> tuple[str, Any]:
    """Run `fn` in a thread; ("done", value) | ("error", exc) | ("interrupted", reason) |
    ("timeout", None), whichever comes first. An abandoned call ends with the server."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except Exception as exc:  # reported to the caller, which decides
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="dspark-smoke-call", daemon=True).start()
    deadline = time.monotonic() + timeout
    while not done.wait(POLL_S):
        reason = interrupt()
        if reason:
            return "interrupted", reason
        if time.monotonic() > deadline:
            return "timeout", None
    return ("error", box["error"]) if "error" in box else ("done", box["value"])


def complete(base_url: str, model: str, prompt: str, max_tokens: int,
             timeout: float) -> RequestOutcome:
    """One greedy completion of exactly `max_tokens` tokens (ignore_eos), judged by HTTP only."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    start = time.monotonic()
    try:
        r = httpx.post(base_url + "/v1/completions", json=body,
                       timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S))
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
        tokens = int(r.json()["usage"]["completion_tokens"])
    except (ValueError, KeyError, TypeError):
        return RequestOutcome(RequestState.http_error, latency, 200,
                              detail="HTTP 200 without usage.completion_tokens")
    return RequestOutcome(RequestState.ok, latency, 200, tokens)


def probe_health(base_url: str) -> bool:
    try:
        return httpx.get(base_url + "/health", timeout=HEALTH_PROBE_TIMEOUT_S).status_code == 200
    except httpx.HTTPError:
        return False


def server_version(base_url: str) -> str | None:
    try:
        return str(httpx.get(base_url + "/version", timeout=HEALTH_PROBE_TIMEOUT_S)
                   .json()["version"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


class _Session:
    """State of one smoke: the target, the watcher, and what stops a wait early."""

    def __init__(self, exp: Expectations, target: Target) -> None:
        self.exp, self.target, self.server = exp, target, target.server
        self.watcher: LogWatcher | None = None
        if target.log_path is not None:
            watch: tuple[Pattern, ...] = exp.required
            if exp.draft_params is not None:
                watch += (exp.draft_params.pattern,)
            self.watcher = LogWatcher(target.log_path, exp.fatal, watch,
                                      context=exp.context_lines)

    def rejection(self) -> str | None:
        validation = self.target.validation
        return validation.rejection() if validation is not None else None

    def stop_reason(self) -> str | None:
        if self.watcher is not None and self.watcher.fired.is_set():
            return "a fatal log line"
        if self.rejection():
            return "vLLM rejected the command"
        if self.server is not None and not self.server.alive():
            return f"the server exited (code {self.server.returncode})"
        return None

    def died(self, grace_s: float = 0.0) -> int | None:
        """The server's exit code if it ended on its own (managed only); `grace_s` waits for
        an exit that a dropped connection announces a moment early."""
        if self.server is None:
            return None
        if grace_s and self.server.alive():
            self.server.wait(grace_s)
        return self.server.returncode

    def boot(self) -> Boot:
        timeout = self.target.ready_timeout_s
        progress(f"waiting for {self.target.base_url}/health (up to {timeout:.0f} s: "
                 "server.ready_timeout_s)")

        def abort() -> str | None:
            if self.rejection():
                return f"stopped the boot: {self.rejection()}"
            return "a fatal log line appeared before /health answered 200" if (
                self.watcher is not None and self.watcher.fired.is_set()) else None

        if self.server is not None:
            try:
                return Boot(True, self.server.wait_healthy(timeout, HEALTH_POLL_S, abort))
            except ServerError as exc:
                return Boot(False, None, exc.message.split("; log:")[0])
        start = time.monotonic()
        while not probe_health(self.target.base_url):
            reason = abort()
            if reason:
                return Boot(False, None, reason)
            if time.monotonic() - start > timeout:
                return Boot(False, None, f"/health did not answer 200 within {timeout:.0f} s "
                            "(server.ready_timeout_s)")
            time.sleep(HEALTH_POLL_S)
        return Boot(True, time.monotonic() - start)

    def scrape_settled(self, before: Scrape, tokens: int) -> Scrape:
        after = scrape(self.target.base_url, self.exp.metrics_timeout_s)
        deadline = time.monotonic() + METRICS_SETTLE_S
        while (after.delta(before).total(GENERATION_TOKENS) < tokens
               and time.monotonic() < deadline and not self.stop_reason()):
            time.sleep(0.05)
            after = scrape(self.target.base_url, self.exp.metrics_timeout_s)
        return after

    def request_phase(self, obs: Observations) -> Observations:
        exp, url = self.exp, self.target.base_url
        try:
            before = scrape(url, exp.metrics_timeout_s)
        except ScrapeError as exc:
            obs = replace(obs, metrics_error=str(exc))
            before = None
        progress(f"requesting {exp.max_tokens} tokens")
        kind, value = race(
            lambda: complete(url, self.target.model, exp.prompt, exp.max_tokens,
                             exp.request_timeout_s),
            exp.request_timeout_s, self.stop_reason)
        if kind == "done":
            request = value
        elif kind == "timeout":
            request = RequestOutcome(RequestState.timeout, detail="no response")
        elif kind == "interrupted":
            request = RequestOutcome(RequestState.interrupted, detail=value)
        else:
            request = RequestOutcome(RequestState.transport_error, detail=str(value))
        code = self.died(0.5 if request.state is RequestState.transport_error else 0.0)
        if code is not None:
            return replace(obs, request=RequestOutcome(RequestState.interrupted),
                           exit_code=code, died_during="the request",
                           stopped_by=f"the server exited (code {code})")
        if kind == "interrupted":
            return replace(obs, request=request, stopped_by=value)
        obs = replace(obs, request=request, metrics_before=before)
        if request.state is RequestState.ok and before is not None:
            try:
                after = self.scrape_settled(before, request.completion_tokens or 0)
                obs = replace(obs, metrics_after=after)
            except ScrapeError as exc:
                obs = replace(obs, metrics_error=str(exc))
        if self.server is None:
            obs = replace(obs, final_health=probe_health(url))
        return obs

    def observe(self) -> Observations:
        obs = Observations(managed=self.server is not None, boot=self.boot())
        if not obs.boot.healthy:
            code = self.died()
            stopped = self.stop_reason()
            return replace(obs, exit_code=code, died_during="boot" if code is not None else None,
                           stopped_by=stopped)
        progress(f"healthy after {obs.boot.seconds:.1f} s")
        return self.request_phase(obs)


def teardown_check(teardown: Teardown | None) -> CheckResult:
    if teardown is None:
        return CheckResult("teardown", Status.skipped, "attached: the server is not ours to stop")
    data = {"seconds": round(teardown.seconds, 3), "signal": teardown.signal,
            "leftover_pids": list(teardown.leftover_pids), "port_free": teardown.port_free}
    if teardown.clean:
        return CheckResult("teardown", Status.passed,
                           f"{teardown.signal}: no process left, port free after "
                           f"{teardown.seconds:.1f} s", data)
    problems = ([f"processes {list(teardown.leftover_pids)} left"] if teardown.leftover_pids
                else []) + ([] if teardown.port_free else ["the port is still in use"])
    return CheckResult("teardown", Status.failed, "; ".join(problems), data)


def validation_check(target: Target) -> CheckResult:
    if target.validation is not None:
        return target.validation.result()
    why = ("attached: the command is not ours" if target.server is None
           else "server.command replaces the planned vLLM command")
    return CheckResult("vllm_accepts_command", Status.skipped, why)


def run_smoke(exp: Expectations, target: Target) -> SmokeRun:
    """Boot (managed) or reach (attached) the server, check it, and tear it down."""
    session = _Session(exp, target)
    server, watcher = target.server, session.watcher
    started = time.monotonic()
    teardown: Teardown | None = None
    version: str | None = None
    try:
        if watcher is not None:
            watcher.start()
        if server is not None:
            progress(f"starting the server; log: {target.log_path}")
            server.start()
        obs = session.observe()
        if watcher is not None and not watcher.fired.is_set():
            time.sleep(LOG_SETTLE_S)  # lines printed just before (e.g. with an HTTP 500)
        at_verdict = watcher.catch_up() if watcher is not None else None
        decided_at, decided = time.time(), time.monotonic()
        validated = validation_check(target)
        preliminary = decide((validated, *evaluate(exp, _with_log(obs, at_verdict, at_verdict))))
        progress(f"verdict: {'PASS' if preliminary.passed else 'FAIL'}: {preliminary.summary}")
        if obs.boot.healthy and not session.stop_reason():
            version = server_version(target.base_url)
    finally:
        if server is not None:
            teardown = server.stop(target.stop_grace_s)
        final = watcher.stop() if watcher is not None else None
    obs = _with_log(obs, final, at_verdict)
    results = (validated, *evaluate(exp, obs), teardown_check(teardown))
    timings = {
        "boot_to_health_s": obs.boot.seconds,
        "request_latency_s": obs.request.latency_s,
        "start_to_verdict_s": decided - started,
        "after_health_to_verdict_s": (decided - started - obs.boot.seconds
                                      if obs.boot.seconds is not None else None),
        "fatal_to_verdict_s": (decided_at - obs.log.fatal[0].detected_at
                               if obs.log is not None and obs.log.fatal else None),
        "teardown_s": teardown.seconds if teardown is not None else None,
        "total_s": time.monotonic() - started,
    }
    return SmokeRun(results, decide(results), obs, timings, decided_at, teardown, version)


def _with_log(obs: Observations, snapshot: LogSnapshot | None,
              at_verdict: LogSnapshot | None) -> Observations:
    """The log as it was at the verdict (teardown noise excluded), with later context lines."""
    if snapshot is None or at_verdict is None:
        return obs
    return replace(obs, log=snapshot.upto(at_verdict.lines_read))
