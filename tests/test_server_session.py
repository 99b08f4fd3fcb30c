"""The one server session behind serve, smoke and bench, against the fake vLLM (a real process
speaking real HTTP): managed and attached share one interface, waits race the log and the
process, the session owns its scratch directory, and a busy port is refused before anything is
written."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dspark_cli.errors import ServerError
from dspark_cli.server import session as probe
from dspark_cli.server.deployment import AttachedServer, LocalDeployment, NodeProcess, Watch
from dspark_cli.server.logscan import compile_patterns
from dspark_cli.server.metrics import GENERATION_TOKENS
from dspark_cli.server.process import free_port
from dspark_cli.server.session import ServerSession
from tests.conftest import dspark_env
from tests.doubles.fake_vllm import SCRIPT
from tests.smoke_support import scratch_of, smoke_argv

FATAL = compile_patterns({"rocm_memory_fault": r"Memory access fault by GPU"})


def managed(tmp_path: Path, *fake_args: str,
            timeout: float = 10.0) -> tuple[LocalDeployment, Watch]:
    port = free_port()
    argv = (sys.executable, str(SCRIPT), "--port", str(port), *fake_args)
    return (LocalDeployment((NodeProcess(0, argv, dict(os.environ), port),), "127.0.0.1", port,
                            tmp_path / "server.log", stop_grace_s=5.0), Watch(timeout, FATAL))


def test_managed_session_boots_scrapes_and_tears_down_clean(tmp_path: Path) -> None:
    target = managed(tmp_path, "--k", "3")
    with ServerSession(*target) as session:
        assert session.wait_healthy() < target[1].ready_timeout_s
        before = session.scrape()
        assert session.version() == "0.32.0"
        scratch = scratch_of(target[0].log_path)
        assert scratch.is_dir() and "exists=True" in target[0].log_path.read_text()
    teardown = session.teardown
    assert teardown is not None and teardown.clean and teardown.signal == "SIGTERM"
    assert teardown.to_dict()["port_free"] is True
    assert not scratch.exists(), "the session owns its scratch directory and removes it"
    assert before.has(GENERATION_TOKENS)


def test_a_fatal_line_ends_the_wait_for_health_at_once(tmp_path: Path) -> None:
    target = managed(tmp_path, "--scenario", "never_healthy", "--print-line",
                     "Memory access fault by GPU node-2 (Agent handle: 0x1) on address 0x0.",
                     timeout=60.0)
    start = time.monotonic()
    with ServerSession(*target) as session, pytest.raises(ServerError) as exc:
        session.wait_healthy()
    assert time.monotonic() - start < 10, "waited for the timeout instead of the fatal line"
    assert exc.value.reason.startswith("a fatal log line (rocm_memory_fault: ")
    assert "last lines:" in exc.value.message and "last lines:" not in exc.value.reason


def test_a_dead_process_ends_the_wait_with_its_exit_code(tmp_path: Path) -> None:
    target = managed(tmp_path, "--no-such-flag", timeout=60.0)
    with ServerSession(*target) as session, pytest.raises(ServerError) as exc:
        session.wait_healthy()
    assert exc.value.reason == "the server exited with code 2 before /health answered 200"


# A server that boots for a while, then dies: it writes when it died (time.time()) first.
DIES = ("import pathlib, sys, time; time.sleep(1.3); "
        "pathlib.Path(sys.argv[1]).write_text(repr(time.time())); sys.exit(5)")


def test_the_readiness_poll_sees_a_death_between_its_polls(tmp_path: Path) -> None:
    """/health is asked about once a second; a process that dies between two asks ends the
    wait at once, not at the next ask."""
    port, died = free_port(), tmp_path / "died"
    argv = (sys.executable, "-c", DIES, str(died))
    target = (LocalDeployment((NodeProcess(0, argv, dict(os.environ), port),), "127.0.0.1",
                              port, tmp_path / "server.log", stop_grace_s=5.0),
              Watch(60.0, FATAL))
    with ServerSession(*target) as session, pytest.raises(ServerError) as exc:
        session.wait_healthy()
    noticed = time.time()
    assert exc.value.reason == "the server exited with code 5 before /health answered 200"
    assert noticed - float(died.read_text()) < 0.75


@pytest.fixture
def running_fake(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    port = free_port()
    log = tmp_path / "attached.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, str(SCRIPT), "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        yield port, log
    finally:
        proc.terminate()
        proc.wait(10)


def test_attached_session_is_the_same_interface_and_never_stops_the_server(
        running_fake: tuple[int, Path]) -> None:
    port, log = running_fake
    target = AttachedServer(f"http://127.0.0.1:{port}", log), Watch(20.0, FATAL)
    with ServerSession(*target) as session:
        assert not session.managed
        session.wait_healthy()
        assert session.scrape().has(GENERATION_TOKENS)
    assert session.teardown is None and session.final_log is not None
    assert session.final_log.lines_read > 0
    with httpx.Client() as client:  # the session's own client closed with it
        assert probe.healthy(client, target[0].planned_url), "an attached server is not ours"


def test_busy_port_is_refused_before_the_run_record_or_a_scratch_dir(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        scratch_root = tmp_path / "tmp"
        scratch_root.mkdir()
        run_dir = tmp_path / "run"
        argv = smoke_argv(port, ["--scenario", "healthy"], f"hydra.run.dir={run_dir}")
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**dspark_env(), "TMPDIR": str(scratch_root)})
    assert done.returncode == 3, done.stderr
    assert f"port {port} on 127.0.0.1 is already in use; nothing was started" in done.stderr
    assert not (run_dir / "launch.sh").exists() and not (run_dir / "config.yaml").exists()
    assert list(scratch_root.iterdir()) == [], "a scratch directory was left behind"
