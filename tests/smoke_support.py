"""Helpers for the tests that run the real `dspark smoke` against the fake vLLM server."""

from __future__ import annotations

import json
import re
import socket
import sys
from pathlib import Path
from typing import Any

import psutil

from dspark_cli.server.process import free_port
from tests.conftest import dspark_argv, run_dspark_process
from tests.doubles.fake_vllm import SCRIPT

ALL_CHECKS = {"vllm_accepts_command", "health", "server_alive", "liveness", "startup_lines",
              "draft_params", "no_fatal_lines", "overrides", "fallbacks", "log_evidence",
              "request", "generation", "engines", "spec_decode", "engagement", "teardown"}


def smoke_args(port: int, fake_args: list[str], *overrides: str) -> list[str]:
    """`dspark smoke`'s arguments against the fake on `port` (later overrides win)."""
    fake = ",".join([sys.executable, str(SCRIPT), "--port", str(port), *fake_args])
    return ["smoke", "+hw=cpu", f"server.port={port}", f"server.command=[{fake}]",
            "model.synthetic=null", "server.ready_timeout_s=5", "smoke.request_timeout_s=2",
            *overrides, "--json"]


def smoke_argv(port: int, fake_args: list[str], *overrides: str) -> list[str]:
    return dspark_argv(*smoke_args(port, fake_args, *overrides))


def run_smoke(tmp_path: Path, scenario: str, *overrides: str,
              fake_args: tuple[str, ...] = ()) -> tuple[int, dict[str, Any], str]:
    port = free_port()
    args = smoke_args(port, ["--scenario", scenario, "--k", "3", *fake_args], *overrides)
    done = run_dspark_process(*args, cwd=tmp_path)
    assert done.stdout.strip(), done.stderr
    report = json.loads(done.stdout)
    assert_nothing_left(report, port)
    return done.returncode, report, done.stderr


def fake_pid(log: Path) -> int:
    match = re.search(r"Started server process \[(\d+)\]", log.read_text())
    assert match, "the fake never started"
    return int(match.group(1))


def scratch_of(log: Path) -> Path:
    """The TMPDIR the fake says it was started with (its log line, with whether it exists)."""
    line = next(x for x in log.read_text().splitlines() if "TMPDIR " in x)
    return Path(line.split("TMPDIR ")[1].split(" exists=")[0])


def port_free(port: int) -> bool:
    """Nothing listens on the port (TIME_WAIT leftovers of closed connections do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def assert_nothing_left(report: dict[str, Any], port: int) -> None:
    pid = fake_pid(Path(report["log"]))
    gone = not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert gone, f"fake server {pid} outlived the smoke"
    assert port_free(port)
    assert checks(report)["teardown"]["status"] == "passed"


def checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {name: c["status"] for name, c in checks(report).items()}
