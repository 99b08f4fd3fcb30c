"""A managed server dies with its supervisor: a SIGHUP (closed terminal, dropped ssh) tears
`serve` and `smoke` down as SIGTERM does, and a `kill -9` of dspark (or the OOM killer) leaves
the server's watchdog to tear the whole process group down within seconds, for one node and
for several. Real signals to real processes; the server is the fake vLLM (a real HTTP server)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dspark_cli.server import watchdog
from dspark_cli.server.process import free_port
from dspark_cli.server.watchdog import alive
from tests.conftest import default_signals, dspark_argv, dspark_env, wait_until
from tests.doubles.fake_vllm import SCRIPT, command
from tests.foreground_serve import ForegroundServe
from tests.smoke_support import port_free, smoke_argv

GONE_WITHIN_S = 5.0


def serve_argv(port: int, *fake_args: str) -> list[str]:
    fake = ",".join(command(port, "healthy", *fake_args))
    return dspark_argv("serve", "+hw=cpu", f"server.port={port}", f"server.command=[{fake}]",
                       "model.synthetic=null", "server.stop_grace_s=3")


running = alive  # the library's own liveness test (a zombie has ended)


def server_pids(supervisor: int) -> set[int]:
    """The supervisor's descendants: the watchdogs, the servers and whatever they started."""
    return {p.pid for p in psutil.Process(supervisor).children(recursive=True)}


def fakes(port: int) -> set[int]:
    """Every fake vLLM process listening-to-be on `port`, wherever it was reparented."""
    found = set()
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if str(SCRIPT) in cmd and str(port) in cmd:
            found.add(proc.pid)
    return running(found)


def assert_gone_soon(pids: set[int], port: int) -> None:
    start = time.monotonic()
    wait_until(lambda: not running(pids), GONE_WITHIN_S, f"processes {sorted(pids)} to end")
    assert time.monotonic() - start < GONE_WITHIN_S
    assert not fakes(port)
    wait_until(lambda: port_free(port), 2, f"port {port} to be free")


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_serve_tears_the_server_down_on_hangup_as_on_sigterm(tmp_path: Path, sig: int) -> None:
    port = free_port()
    serve = ForegroundServe(serve_argv(port), tmp_path, dspark_env())
    try:
        serve.wait_ready(60)
        pids = server_pids(serve.proc.pid)
        assert fakes(port) <= pids and fakes(port)
        serve.proc.send_signal(sig)
        assert serve.proc.wait(30) == 130, serve.tail()
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
    assert not running(pids), serve.tail()
    assert not fakes(port) and port_free(port)
    assert "dspark: stopped." in serve.tail()


def test_kill_9_of_serve_ends_the_server_group_within_seconds(tmp_path: Path) -> None:
    port = free_port()
    serve = ForegroundServe(serve_argv(port), tmp_path, dspark_env())
    try:
        serve.wait_ready(60)
        pids = server_pids(serve.proc.pid)
        groups = {os.getpgid(p) for p in pids}
        assert len(groups) == 1 and os.getpgid(serve.proc.pid) not in groups
        serve.proc.kill()
        serve.proc.wait(10)
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
    assert_gone_soon(pids, port)


def test_kill_9_of_serve_kills_a_server_that_ignores_sigterm_after_the_grace(
        tmp_path: Path) -> None:
    port = free_port()
    serve = ForegroundServe(serve_argv(port, "--ignore-sigterm"), tmp_path, dspark_env())
    try:
        serve.wait_ready(60)
        pids = server_pids(serve.proc.pid)
        serve.proc.kill()
        serve.proc.wait(10)
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
    time.sleep(1.5)  # inside the 3 s grace the server, deaf to SIGTERM, still runs
    assert fakes(port)
    wait_until(lambda: not running(pids), 3 + GONE_WITHIN_S, "the SIGKILL after the grace")
    assert not fakes(port)


def test_smoke_on_hangup_tears_the_server_down_and_exits_130(tmp_path: Path) -> None:
    port = free_port()
    argv = smoke_argv(port, ["--scenario", "hung_request"], "smoke.request_timeout_s=60")
    proc = subprocess.Popen(argv, cwd=tmp_path, env=dspark_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    try:
        wait_until(lambda: fakes(port) or proc.poll() is not None, 60, "the fake to start")
        wait_until(lambda: not port_free(port) or proc.poll() is not None, 30, "it to listen")
        pids = server_pids(proc.pid)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert not running(pids) and not fakes(port) and port_free(port)


# A supervisor that starts a two-node session from a worker thread that then ends (the
# PR_SET_PDEATHSIG trap: it fires when that thread ends), prints its servers' pids and waits.
SUPERVISOR = """
import json, os, sys, threading, time
from pathlib import Path
from dspark_cli.server.deployment import Watch
from dspark_cli.server.deployment import LocalDeployment, NodeProcess
from dspark_cli.server.session import ServerSession
port, log, fake = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
node = (sys.executable, "-c", "import time; print('node up', flush=True); time.sleep(600)")
head = NodeProcess(0, (sys.executable, fake, "--port", str(port)), dict(os.environ), port)
deployment = LocalDeployment((head, NodeProcess(1, node, dict(os.environ))), "127.0.0.1", port,
                             log, stop_grace_s=3.0)
session = ServerSession(deployment, Watch(30.0))
started = threading.Thread(target=lambda: (session.start(), session.wait_healthy()))
started.start()
started.join()
print(json.dumps([p.pid for p in deployment.processes]), flush=True)
time.sleep(600)
"""


def test_kill_9_of_a_supervisor_ends_every_node_even_when_a_thread_started_them(
        tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(port),
                             str(tmp_path / "server.log"), str(SCRIPT)],
                            env=dspark_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        leaders = json.loads(proc.stdout.readline())
        assert len(leaders) == 2
        pids = server_pids(proc.pid)
        time.sleep(1.0)  # the starting thread is gone: the servers must not have followed it
        assert running(pids) == pids and fakes(port)
        assert (tmp_path / "server.log").read_text().count("node up") == 1
        proc.kill()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_gone_soon(pids, port)
    assert not any(running({p}) for p in leaders)


def run_watchdog(argv: list[str]) -> subprocess.CompletedProcess[str]:
    read, write = os.pipe()
    try:
        return subprocess.run(watchdog.command(argv, read, 1.0), pass_fds=(read,),
                              capture_output=True, text=True, timeout=30, env=dspark_env())
    finally:
        os.close(read)
        os.close(write)


def test_the_watchdog_exits_as_its_server_did() -> None:
    assert run_watchdog([sys.executable, "-c", "import sys; sys.exit(7)"]).returncode == 7
    killed = run_watchdog([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"])
    assert killed.returncode == -signal.SIGKILL
    termed = run_watchdog([sys.executable, "-c", "import os, signal; "
                           "os.kill(os.getpid(), signal.SIGTERM)"])
    assert termed.returncode == -signal.SIGTERM
    missing = run_watchdog(["/nonexistent/vllm", "serve"])
    assert missing.returncode == watchdog.CANNOT_START
    assert "could not start '/nonexistent/vllm'" in missing.stderr


def test_a_closed_terminal_tears_serve_down(tmp_path: Path) -> None:
    """The real hangup: `dspark serve` on a terminal of its own (a pty, its controlling
    terminal), which is then closed. The kernel sends SIGHUP; writes to the terminal fail from
    then on, and the teardown still runs to its end."""
    import pty

    port = free_port()
    pid, master = pty.fork()
    if pid == 0:  # the child: on the pty, as a shell would start it
        try:
            os.chdir(tmp_path)
            default_signals()
            os.execvpe(sys.executable, serve_argv(port), dspark_env())
        finally:
            os._exit(127)
    seen = b""
    try:
        def ready() -> bool:
            nonlocal seen
            with contextlib.suppress(OSError):
                seen += os.read(master, 65536)
            return b"ready at" in seen

        wait_until(ready, 60, "`dspark serve` to say it is ready on its terminal")
        pids = server_pids(pid)
        assert fakes(port)
    finally:
        os.close(master)  # the terminal is gone
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 130, seen.decode(errors="replace")[-2000:]
    assert not running(pids) and not fakes(port) and port_free(port)
