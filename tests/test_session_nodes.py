"""The one server session with several nodes on this host (deploy=local): every node its own
process group with its own TMPDIR, one log with each node's lines marked, a node that dies ends
every wait, health is the head's, and close tears every node down into one Teardown. The head is
the fake vLLM (a real HTTP server); the other nodes are real processes that print and wait, as a
headless vLLM node does."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from dspark_cli.errors import ServerError
from dspark_cli.server.deployment import LocalDeployment, NodeProcess, Watch
from dspark_cli.server.logscan import compile_patterns
from dspark_cli.server.process import Teardown, free_port
from dspark_cli.server.session import ServerSession
from tests.conftest import wait_until
from tests.doubles.fake_vllm import SCRIPT

FATAL = compile_patterns({"worker_died": r"Worker proc \S+ died unexpectedly"})


def headless(code: str) -> tuple[str, ...]:
    """A node that prints its TMPDIR, runs `code`, then waits like a headless engine."""
    return (sys.executable, "-u", "-c",
            "import os, sys, time\n"
            "print('node up, TMPDIR', os.environ['TMPDIR'], flush=True)\n"
            f"{code}\n"
            "time.sleep(600)\n")


def target(tmp_path: Path, *nodes: NodeProcess, timeout: float = 20.0,
           head_args: tuple[str, ...] = ()) -> tuple[LocalDeployment, Watch]:
    port = free_port()
    argv = (sys.executable, str(SCRIPT), "--port", str(port), *head_args)
    head = NodeProcess(0, argv, dict(os.environ), port)
    return (LocalDeployment((head, *nodes), "127.0.0.1", port, tmp_path / "server.log",
                            stop_grace_s=3.0), Watch(timeout, FATAL))


def node(rank: int, code: str = "pass", port: int | None = None) -> NodeProcess:
    return NodeProcess(rank, headless(code), dict(os.environ), port)


def test_every_node_runs_in_its_own_group_and_all_are_torn_down(tmp_path: Path) -> None:
    t = target(tmp_path, node(1), node(2))
    with ServerSession(*t) as session:
        session.wait_healthy()
        pids = [p.pid for p in session.deployment.processes]
        assert len({os.getpgid(pid) for pid in pids}) == 3, "one process group per node"
        wait_until(lambda: t[0].log_path.read_text().count("node up") == 2, 10, "nodes' lines")
        log = t[0].log_path.read_text().splitlines()
        marked = [line for line in log if "node up" in line]
        assert sorted(line.split("]")[0] for line in marked) == ["[node 1", "[node 2"]
        scratches = {line.split("TMPDIR ")[1] for line in marked}
        assert len(scratches) == 2 and all(Path(s).is_dir() for s in scratches)
        assert session.stop_reason() is None and session.exit_code() is None
    teardown = session.teardown
    assert teardown is not None and teardown.clean, teardown
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in pids)
    assert not any(Path(s).exists() for s in scratches), "every node's TMPDIR is removed"


def test_a_dead_node_ends_the_wait_for_health_naming_it(tmp_path: Path) -> None:
    t = target(tmp_path, node(1, "sys.exit(7)"), head_args=("--scenario", "never_healthy"),
               timeout=60.0)
    start = time.monotonic()
    with ServerSession(*t) as session, pytest.raises(ServerError) as exc:
        session.wait_healthy()
    assert time.monotonic() - start < 15, "waited for the timeout instead of the dead node"
    assert exc.value.reason == "node 1 of 2 exited with code 7 before /health answered 200"
    assert session.teardown is not None and session.teardown.clean


def test_a_node_killed_after_boot_is_seen_and_its_code_reported(tmp_path: Path) -> None:
    t = target(tmp_path, node(1))
    with ServerSession(*t) as session:
        session.wait_healthy()
        os.killpg(session.deployment.processes[1].pid, signal.SIGKILL)
        wait_until(lambda: session.stop_reason() is not None, 10, "the node's death")
        assert session.stop_reason() == "node 1 of 2 exited with code -9"
        assert session.exit_code() == -9 and session.deployment.dead_node() == (1, -9)
        assert session.healthy(), "health is the head's; the session's reason is what fails"


def test_a_fatal_line_of_another_node_is_seen_in_the_one_log(tmp_path: Path) -> None:
    t = target(tmp_path, node(1, "print('Worker proc VllmWorker-0 died unexpectedly', "
                                 "flush=True)"), head_args=("--scenario", "never_healthy"),
               timeout=60.0)
    with ServerSession(*t) as session, pytest.raises(ServerError) as exc:
        session.wait_healthy()
    assert exc.value.reason.startswith("a fatal log line (worker_died: [node 1] Worker proc")


def test_a_busy_api_port_of_another_node_is_refused_before_anything_starts(
        tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        t = target(tmp_path, node(1, port=port))
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is already in use"):
            ServerSession(*t).start()
    assert not t[0].log_path.exists()


def test_serve_forwards_a_signal_to_every_node(tmp_path: Path) -> None:
    t = target(tmp_path, node(1), node(2))
    with ServerSession(*t) as session:
        session.wait_healthy()
        session.signal(signal.SIGTERM)
        assert session.wait(poll_s=0.05) is not None
        wait_until(lambda: all(not p.alive() for p in session.deployment.processes), 10,
                   "every node stopped")
    assert session.teardown is not None and session.teardown.clean


def test_teardowns_combine_to_the_strongest_signal_and_every_leftover() -> None:
    parts = [Teardown(1.0, "exited", (), True), Teardown(4.0, "SIGKILL", (12,), True),
             Teardown(2.0, "SIGTERM", (3,), False)]
    combined = Teardown.combined(parts)
    assert combined == Teardown(4.0, "SIGKILL", (3, 12), False)
    assert not combined.clean
    assert Teardown.combined([Teardown(0.5, "SIGTERM", (), True)]).clean
