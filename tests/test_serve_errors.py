"""`dspark serve` refuses what vLLM would reject, and a taken port, before any boot."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.conftest import run_dspark


def test_an_option_vllm_does_not_have_is_refused_before_validation() -> None:
    done = run_dspark("serve", "+hw=cpu", "+serving.extra_args.no_such_option=1", "--dry-run",
                      "--validate")
    assert done.returncode == 2, done.stderr
    assert "`serving.extra_args.no_such_option` is not an option of " in done.stderr
    assert "Traceback" not in done.stderr


def test_a_taken_port_is_a_server_error_and_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_dspark("serve", "+hw=cpu", f"server.port={port}", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert not (tmp_path / "runs" / "serve").exists() or not any(
        (tmp_path / "runs" / "serve").rglob("server.log"))
