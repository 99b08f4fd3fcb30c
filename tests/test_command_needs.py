"""Commands detect hardware only when they plan a launch on this machine (their contract's
`needs_machine`: cli/command.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.checkpoint_factory import build_checkpoint
from tests.conftest import run_dspark
from tests.fake_gpu import HOSTS, fake_host


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("ckpt") / "ckpt")


@pytest.mark.parametrize(("host", "code", "needle"), [
    ("a100", 2, "no hardware profile matches the detected cuda GPUs (NVIDIA A100-SXM4-80GB)"),
    ("h200x8", 0, "--tensor-parallel-size 8"),
    ("no-gpu", 0, "--dtype float32"),
])
def test_the_fake_hosts_are_what_serve_detects(tmp_path: Path, host: str, code: int,
                                               needle: str) -> None:
    calls = tmp_path / "calls"
    done = run_dspark("serve", "--dry-run", env=fake_host(tmp_path / "bin", host, calls))
    assert done.returncode == code, done.stderr
    assert needle in done.stdout + done.stderr
    assert "--query-gpu=" in calls.read_text()


@pytest.mark.parametrize("model", [["model=local"], []], ids=["model=local", "default-model"])
def test_verify_checkpoint_is_the_same_on_every_host(tmp_path: Path, ckpt: Path,
                                                     model: list[str]) -> None:
    results = {}
    for host in HOSTS:
        calls = tmp_path / f"{host}.calls"
        done = run_dspark("verify-checkpoint", *model, f"model.path={ckpt}", "--json",
                          env=fake_host(tmp_path / host, host, calls))
        assert not calls.exists(), f"{host}: hardware was detected"
        results[host] = (done.returncode, json.loads(done.stdout))
    assert results["a100"] == results["h200x8"] == results["no-gpu"]
    code, report = results["no-gpu"]
    assert code == 0 and report["ok"] is True


def test_verify_checkpoint_composes_no_hw_profile(tmp_path: Path, ckpt: Path) -> None:
    env = fake_host(tmp_path / "bin", "h200x8")
    done = run_dspark("verify-checkpoint", f"model.path={ckpt}", "--cfg", "job", env=env)
    assert done.returncode == 0, done.stderr
    assert "name: local" in done.stdout and "hw: null" in done.stdout
    assert "DeepSeek" not in done.stdout


def test_bench_report_does_not_detect_hardware(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    (tmp_path / "runs").mkdir()
    done = run_dspark("bench", "--report", str(tmp_path / "runs"),
                      env=fake_host(tmp_path / "bin", "a100", calls), cwd=tmp_path)
    assert not calls.exists()
    assert done.returncode == 2
    assert "No cell records" in done.stderr and "hardware profile" not in done.stderr
