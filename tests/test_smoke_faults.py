"""`dspark smoke` end to end against the fake vLLM: the real command, real processes, real HTTP.

Each broken-server scenario must give its failing verdict and exit code, and leave no process
and no listener behind.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from dspark_cli.server.process import free_port
from tests.conftest import default_signals, dspark_env, run_dspark_process
from tests.smoke_support import (
    ALL_CHECKS,
    checks,
    fake_pid,
    port_free,
    run_smoke,
    smoke_args,
    smoke_argv,
    statuses,
)


def test_healthy_fake_passes_with_every_check(tmp_path: Path) -> None:
    code, report, _ = run_smoke(tmp_path, "healthy")
    assert code == 0, report["verdict"]
    assert set(statuses(report)) == ALL_CHECKS
    # no DSpark pin; a replaced command (vLLM's verdict); one engine. Engagement is read from
    # the fake's /metrics counters: K every step, as its fixed-K launch expects.
    skipped = {"draft_params", "vllm_accepts_command", "engines"}
    assert {n for n, s in statuses(report).items() if s == "skipped"} == skipped
    assert {s for n, s in statuses(report).items() if n not in skipped} == {"passed"}
    spec = report["counters"]["spec_decode"]
    assert spec["draft_tokens"] == spec["drafts"] * 3 > 0
    assert report["counters"]["generation_tokens"] == 48
    assert report["versions"]["server"] == "0.32.0"
    assert (Path(report["log"]).parent / "smoke.json").is_file()
    engaged = next(c for c in report["checks"] if c["name"] == "engagement")
    assert engaged["data"]["level"] == "/metrics spec-decode counters"
    assert engaged["data"]["steps"] == spec["drafts"] and engaged["data"]["k"] == 3


@pytest.mark.parametrize(
    ("scenario", "code", "failed", "evidence", "overrides"),
    [
        ("gpu_fault", 1, "no_fatal_lines", "rocm_memory_fault", ()),
        ("die_during_request", 3, "server_alive", "exited with code -9 during the request", ()),
        ("traceback", 1, "no_fatal_lines", "EngineCore encountered a fatal error", ()),
        ("short_tokens", 1, "generation", "usage says 41", ()),
        # the whole ready timeout is waited: a short one
        ("never_healthy", 3, "health", "did not answer 200 within 1 s",
         ("server.ready_timeout_s=1",)),
        ("hung_request", 1, "request", "queue hang", ()),
        ("bad_spec_counters", 1, "spec_decode", "draft tokens 58 != drafts x K", ()),
    ],
)
def test_fault_scenarios_give_their_verdict(tmp_path: Path, scenario: str, code: int,
                                            failed: str, evidence: str,
                                            overrides: tuple[str, ...]) -> None:
    rc, report, stderr = run_smoke(tmp_path, scenario, *overrides)
    assert rc == code, report["verdict"]
    assert report["verdict"]["exit_code"] == code and not report["verdict"]["passed"]
    assert set(statuses(report)) == ALL_CHECKS
    assert statuses(report)[failed] == "failed"
    assert evidence in checks(report)[failed]["evidence"]
    assert "verdict: FAIL" in stderr


def test_fatal_line_is_reported_with_the_lines_around_it(tmp_path: Path) -> None:
    _, report, _ = run_smoke(tmp_path, "traceback")
    events = checks(report)["no_fatal_lines"]["data"]["events"]
    assert [e["pattern"] for e in events] == ["engine_core_failed", "traceback"]
    context = "\n".join(events[0]["context"])
    assert "Application startup complete" in context  # before the event
    assert "RuntimeError: fake_vllm: simulated engine failure" in context  # after it


def test_a_fatal_line_ends_the_smoke_without_waiting_for_the_timeout(tmp_path: Path) -> None:
    # The fault hangs the request; only the log watcher can end this smoke before 60 s.
    start = time.monotonic()
    rc, report, _ = run_smoke(tmp_path, "gpu_fault", "smoke.request_timeout_s=60")
    assert rc == 1
    assert time.monotonic() - start < 30
    assert statuses(report)["request"] == "not_run"
    assert report["timings"]["fatal_to_verdict_s"] is not None


def test_a_server_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    rc, report, _ = run_smoke(tmp_path, "healthy", "server.stop_grace_s=1",
                              fake_args=("--ignore-sigterm",))
    assert rc == 0
    assert checks(report)["teardown"]["data"]["signal"] == "SIGKILL"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_tears_down_and_exits_130(tmp_path: Path, sig: signal.Signals) -> None:
    port = free_port()
    proc = subprocess.Popen(
        smoke_argv(port, ["--scenario", "hung_request"], "smoke.request_timeout_s=60"),
        cwd=tmp_path, env=dspark_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=default_signals)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "requesting" in line:
                break
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "cancelled" in err
    logs = list(tmp_path.rglob("server.log"))
    assert len(logs) == 1
    pid = fake_pid(logs[0])
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert port_free(port)


def test_busy_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_dspark_process(*smoke_args(port, ["--scenario", "healthy"]), cwd=tmp_path,
                                  timeout=60)
    assert done.returncode == 3
    assert "already in use" in done.stderr
    assert "Traceback" not in done.stderr
    assert not list(tmp_path.rglob("server.log"))


def test_a_command_that_cannot_start_is_a_server_error(tmp_path: Path) -> None:
    port = free_port()
    args = smoke_args(port, [])
    args[args.index(next(a for a in args if a.startswith("server.command=")))] = (
        "server.command=[/nonexistent/vllm,serve]")
    done = run_dspark_process(*args, cwd=tmp_path, timeout=60)
    assert done.returncode == 3
    assert "could not start" in done.stderr and "Traceback" not in done.stderr
