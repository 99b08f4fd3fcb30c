"""Attaching to a server that is not there fails within `server.attach_refused_s` (exit 3),
not after `server.ready_timeout_s`; a server that is there but still booting is waited for.
The tests shorten the refusal (2 s by default) to REFUSED_S."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dspark_cli.errors import ExitCode, ServerError
from dspark_cli.server import session as probe
from dspark_cli.server.deployment import AttachedServer, Watch
from dspark_cli.server.process import free_port
from dspark_cli.server.session import ServerSession
from tests.conftest import dspark_argv, dspark_env, wait_until
from tests.doubles.fake_vllm import SCRIPT

# Far beyond what any test waits: reaching it means the refusal was not noticed.
LONG_TIMEOUT_S = 900.0
REFUSED_S = 0.5
DEFAULT_REFUSED_S = Watch(LONG_TIMEOUT_S).attach_refused_s  # 2 s: a fake boots within it


def attached(port: int, host: str = "127.0.0.1",
             refused_s: float = REFUSED_S) -> tuple[AttachedServer, Watch]:
    return AttachedServer(f"http://{host}:{port}"), Watch(LONG_TIMEOUT_S,
                                                          attach_refused_s=refused_s)


@pytest.mark.parametrize("host", ["127.0.0.1", "no-such-host.invalid"])
def test_nothing_listening_is_a_server_error_after_the_grace(host: str) -> None:
    session = ServerSession(*attached(free_port(), host)).start()
    started = time.monotonic()
    with pytest.raises(ServerError) as exc:
        session.wait_healthy()
    waited = time.monotonic() - started
    assert "nothing listens at" in exc.value.reason
    assert REFUSED_S <= waited < LONG_TIMEOUT_S / 10


def test_a_server_that_comes_up_within_the_grace_is_attached(tmp_path: Path) -> None:
    port = free_port()
    fake = subprocess.Popen([sys.executable, str(SCRIPT), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        session = ServerSession(*attached(port, refused_s=DEFAULT_REFUSED_S)).start()
        assert session.wait_healthy() < LONG_TIMEOUT_S / 10
    finally:
        fake.terminate()
        fake.wait(10)


def test_smoke_attached_to_nothing_exits_3_within_seconds(tmp_path: Path) -> None:
    port = free_port()
    done = subprocess.run(
        dspark_argv("smoke", "+hw=cpu", f"server.url=http://127.0.0.1:{port}",
                    f"server.ready_timeout_s={LONG_TIMEOUT_S}",
                    f"server.attach_refused_s={REFUSED_S}"),
        cwd=tmp_path, env=dspark_env(), capture_output=True, text=True,
        timeout=LONG_TIMEOUT_S / 10)
    assert done.returncode == ExitCode.SERVER == 3, done.stderr
    assert f"nothing listens at http://127.0.0.1:{port} for {REFUSED_S} s" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("url", ["notaurl", "ftp://127.0.0.1:21", "http://"])
def test_a_url_that_cannot_be_attached_to_is_a_usage_error(tmp_path: Path, url: str) -> None:
    done = subprocess.run(
        dspark_argv("smoke", "+hw=cpu", f"server.url={url}"),
        cwd=tmp_path, env=dspark_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == ExitCode.USAGE == 2, done.stderr
    assert "cannot be attached to" in done.stderr and "Traceback" not in done.stderr


def test_a_server_that_is_not_vllm_is_not_waited_for(tmp_path: Path) -> None:
    port = free_port()
    other = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                              "127.0.0.1"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: probe.health(httpx.Client(), f"http://127.0.0.1:{port}") == 404, 60,
                   "the other server")
        session = ServerSession(*attached(port)).start()
        with pytest.raises(ServerError) as exc:
            session.wait_healthy()
        assert "no vLLM server (/health: 404)" in exc.value.reason
    finally:
        other.terminate()
        other.wait(10)
