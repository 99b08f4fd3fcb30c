"""A multirun job that fails is reported on the terminal that started the sweep, with its error,
and the sweep exits non-zero: jobs in submitit's processes (whose stderr goes to
`.submitit/*/*.err`) as well as jobs run in-process. Real Hydra launchers, real processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hydra.experimental.callback import Callback

from dspark_cli.cli.multirun import JOB_FILE
from tests.conftest import run_dspark

SWEEP = ["bench", "+hw=cpu", "--dry-run", "-m", "bench.concurrency=2,5"]


@pytest.mark.parametrize("launcher", [[], ["hydra/launcher=submitit_local",
                                           "hydra.launcher.timeout_min=5"]],
                         ids=["basic", "submitit_local"])
def test_each_failed_job_is_reported_and_the_sweep_fails(tmp_path: Path,
                                                         launcher: list[str]) -> None:
    sweep = tmp_path / "sweep"
    done = run_dspark(*SWEEP, *launcher, f"hydra.sweep.dir={sweep}", cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"dspark: multirun job {sweep / '1'} exited with code 2" in done.stderr
    reported = done.stderr.split(f"multirun job {sweep / '1'}")[-1]
    assert "bench.concurrency=5 is not one of" in reported
    assert "dspark: 1 of 2 multirun jobs failed." in done.stderr
    codes = {p.parent.name: json.loads(p.read_text())["code"] for p in sweep.glob(f"*/{JOB_FILE}")}
    assert codes == {"0": 0, "1": 2}


def test_a_sweep_whose_jobs_pass_exits_0_and_says_nothing_more(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    done = run_dspark("bench", "+hw=cpu", "--dry-run", "-m", "bench.concurrency=2,8",
                      "hydra/launcher=submitit_local", f"hydra.sweep.dir={sweep}",
                      cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "multirun job" not in done.stderr


def test_a_job_that_died_without_an_outcome_is_named(tmp_path: Path) -> None:
    import io

    from dspark_cli.cli.multirun import print_failures

    (tmp_path / "0").mkdir()
    (tmp_path / "0" / JOB_FILE).write_text(json.dumps(
        {"directory": str(tmp_path / "0"), "code": 0, "lines": []}))
    (tmp_path / "1" / ".hydra").mkdir(parents=True)  # started, never finished
    (tmp_path / ".submitit").mkdir()  # submitit's own folder is no job
    out = io.StringIO()
    assert print_failures(tmp_path, out) == 1
    assert f"multirun job {tmp_path / '1'} left no outcome" in out.getvalue()
    assert "1 of 2 multirun jobs failed" in out.getvalue()


def test_a_reused_sweep_directory_blames_no_earlier_sweeps_job(tmp_path: Path) -> None:
    """A sweep whose job 1 failed, then a sweep of one passing job into the same directory:
    the earlier job 1 (its outcome, its Hydra record) is not this sweep's to report."""
    sweep = tmp_path / "sweep"
    first = run_dspark(*SWEEP, f"hydra.sweep.dir={sweep}", cwd=tmp_path, timeout=300)
    assert first.returncode == 2, first.stderr[-3000:]
    again = run_dspark("bench", "+hw=cpu", "--dry-run", "-m", "bench.concurrency=2",
                       f"hydra.sweep.dir={sweep}", cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "multirun job" not in again.stderr


def test_the_issues_sweep_of_two_after_three_blames_no_earlier_job(tmp_path: Path) -> None:
    """A sweep of three whose job 2 failed, then a sweep of two passing dry runs into the same
    `hydra.sweep.dir`: the earlier job 2 is not this sweep's, exit 0."""
    sweep = tmp_path / "sweep"
    first = run_dspark("bench", "+hw=cpu", "--dry-run", "-m", "bench.concurrency=2,8,5",
                       f"hydra.sweep.dir={sweep}", cwd=tmp_path, timeout=300)
    assert first.returncode == 2 and "1 of 3 multirun jobs failed" in first.stderr
    again = run_dspark("bench", "+hw=cpu", "--dry-run", "-m", "bench.concurrency=2,8",
                       f"hydra.sweep.dir={sweep}", cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "multirun job" not in again.stderr


class LateJob(Callback):
    """A job of an earlier sweep into the same directory that ends while this sweep runs (a
    queued Slurm job): its folder and its failed outcome appear after this sweep started."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        job = Path(str(config.hydra.sweep.dir)) / "2"
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "config.yaml").write_text("bench: {}\n")
        (job / JOB_FILE).write_text(json.dumps({
            "directory": str(job), "code": 2, "sweep": "0" * 32,
            "lines": ["dspark: bench.concurrency=5 is not one of bench.concurrencies"]}))


def test_a_job_of_another_sweep_ending_during_this_one_is_not_blamed(tmp_path: Path) -> None:
    """Only the jobs this sweep launched are judged: each outcome names its sweep."""
    sweep = tmp_path / "sweep"
    done = run_dspark("bench", "+hw=cpu", "--dry-run", "-m", "bench.concurrency=2,8",
                      f"hydra.sweep.dir={sweep}",
                      f"+hydra.callbacks.late._target_={__name__}.LateJob",
                      cwd=tmp_path, timeout=300)
    assert (sweep / "2" / JOB_FILE).is_file()  # it did land
    assert done.returncode == 0, done.stderr[-3000:]
    assert "multirun job" not in done.stderr
    mine = [json.loads((sweep / j / JOB_FILE).read_text())["sweep"] for j in ("0", "1")]
    assert mine[0] == mine[1] and mine[0] != "0" * 32


@pytest.mark.parametrize("outcome", ['{"directory": "x", "code": 0, "li', "[" * 100_000,
                                     '{"code": "0", "lines": []}',
                                     b'{"code": 0, "lines": ["\xff"]}',
                                     '{"code": 0, "lines": ["\\ud800"]}', "fifo"],
                         ids=["truncated", "nested", "a string code", "bad byte",
                              "lone surrogate", "fifo"])
def test_an_unreadable_job_outcome_is_a_job_that_failed(tmp_path: Path,
                                                        outcome: str | bytes) -> None:
    """A truncated, nested, mistyped, undecodable or non-regular outcome file: that job is
    named as having left no readable outcome, the sweep fails, nothing raises or hangs."""
    import io
    import os

    from dspark_cli.cli.multirun import print_failures

    job = tmp_path / "0"
    (job / ".hydra").mkdir(parents=True)
    if outcome == "fifo":
        os.mkfifo(job / JOB_FILE)
    elif isinstance(outcome, bytes):
        (job / JOB_FILE).write_bytes(outcome)
    else:
        (job / JOB_FILE).write_text(outcome)
    out = io.StringIO()
    assert print_failures(tmp_path, out) == 1
    assert f"multirun job {job} left no outcome" in out.getvalue() \
        or "its outcome file is unreadable" in out.getvalue(), out.getvalue()
    assert "1 of 1 multirun jobs failed" in out.getvalue()
