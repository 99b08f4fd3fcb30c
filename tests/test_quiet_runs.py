"""Quiet success, no litter, output that survives a log: a dry run prints its plan, names the
profile it detected and why, and says in one line which rules it could not check (each with its
reason under -v; rules that do not apply to the plan not at all); it leaves no directory. A failed
run leaves no run directory that holds only Hydra's files, and names any other one, shell-quoted.
A table written to a pipe keeps every cell on one line."""

from __future__ import annotations

import json
import shlex
import socket
import tempfile
from pathlib import Path

import pytest
from checkpoint_factory import build_checkpoint, rewrite_json

from dspark_cli.cli import main
from tests.conftest import run_dspark
from tests.fake_gpu import fake_host


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory of the test's own, with a temporary directory of its own."""
    cwd, scratch = tmp_path / "work dir", tmp_path / "tmp"
    cwd.mkdir()
    scratch.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return cwd


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_dry_run_says_what_it_did_not_check_in_one_line(
        capsys: pytest.CaptureFixture[str], here: Path) -> None:
    code, out, err = run(capsys, "serve", "+hw=mi350x", "--dry-run")
    assert code == 0, err
    assert "vllm serve /models/DeepSeek-V4-Flash-DSpark" in out
    unchecked = [line for line in err.splitlines() if "did not check" in line]
    assert len(unchecked) == 1, err
    for rule in ("platform-matches-machine", "gpus-match-profile", "aiter-importable"):
        assert rule in unchecked[0]
    assert "skipped" not in err and "not checked in a dry run" not in err
    assert list(here.iterdir()) == [] and list(Path(tempfile.gettempdir()).iterdir()) == []


def test_verbose_gives_each_rule_its_line(capsys: pytest.CaptureFixture[str],
                                          here: Path) -> None:
    code, _, err = run(capsys, "serve", "+hw=mi350x", "--dry-run", "-v")
    assert code == 0, err
    assert ("dspark: preflight platform-matches-machine skipped: not checked in a dry run: "
            "the profile's platform is this machine's") in err
    assert "did not check" not in err


def test_a_rule_that_does_not_apply_is_not_mentioned(capsys: pytest.CaptureFixture[str],
                                                     here: Path) -> None:
    """+hw=h200 serves its experts through marlin: the aiter rules are not its concern."""
    code, _, err = run(capsys, "serve", "+hw=h200", "--dry-run")
    assert code == 0, err
    assert "aiter" not in err and "gpus-match-profile" in err
    _, _, verbose = run(capsys, "serve", "+hw=h200", "--dry-run", "--verbose")
    assert "dspark: preflight aiter-importable does not apply" in verbose


def test_a_dry_run_without_hw_names_the_detected_profile_and_why(
        capsys: pytest.CaptureFixture[str], here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run(capsys, "serve", "--dry-run")
    assert code == 0, err
    assert "dspark: hardware: no +hw given; detected +hw=cpu (no GPU found)" in err
    for name, value in fake_host(here.parent / "gpu", "h200x8").items():
        monkeypatch.setenv(name, value)
    code, out, err = run(capsys, "serve", "--dry-run")
    assert code == 0, err
    assert "detected +hw=h200 (8 cuda GPUs: NVIDIA H200" in err
    assert "--tensor-parallel-size 8" in out


def test_a_multirun_dry_run_leaves_nothing(capsys: pytest.CaptureFixture[str],
                                           here: Path) -> None:
    code, out, err = run(capsys, "serve", "-m", "+hw=mi350x", "speculative=none,dspark_fixed",
                         "--dry-run")
    assert code == 0, err
    assert out.count("vllm serve /models/DeepSeek-V4-Flash-DSpark") == 2
    assert list(here.iterdir()) == [] and list(Path(tempfile.gettempdir()).iterdir()) == []


@pytest.mark.usefixtures("default_port_busy")  # the preflight answers before the port
def test_a_refused_preflight_leaves_no_run_directory(capsys: pytest.CaptureFixture[str],
                                                     here: Path) -> None:
    code, _, err = run(capsys, "serve", "+hw=mi350x")
    assert code == 1, err
    assert "platform-matches-machine FAILED" in err and "already in use" not in err
    assert list(here.iterdir()) == []


def test_a_failed_run_with_records_names_its_directory_quoted(
        capsys: pytest.CaptureFixture[str], here: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = run(capsys, "smoke", "+hw=cpu", f"server.url=http://127.0.0.1:{port}",
                       "server.ready_timeout_s=1")
    assert code == 3, err
    last = err.rstrip("\n").splitlines()[-1]
    assert last.startswith("dspark: run directory '"), err
    (directory,) = shlex.split(last.removeprefix("dspark: run directory "))
    assert Path(directory).parent == here / "runs" / "smoke"
    assert (Path(directory) / "smoke.json").is_file()


def test_a_table_in_a_pipe_keeps_every_cell_whole(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path / "ckpt")
    rewrite_json(root / "config.json", lambda c: c.pop("dspark_target_layer_ids"))
    done = run_dspark("verify-checkpoint", f"model.path={root}", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    row = [line for line in done.stdout.splitlines() if "dspark-key-missing" in line]
    assert len(row) == 1, done.stdout
    assert "dspark_target_layer_ids" in row[0]
    assert "config.json lacks a key DSpark needs; use the checkpoint's own config.json" in row[0]
    data = json.loads(run_dspark("verify-checkpoint", f"model.path={root}", "--json",
                                 cwd=tmp_path).stdout)
    assert [p["code"] for p in data["problems"]] == ["dspark-key-missing"]
