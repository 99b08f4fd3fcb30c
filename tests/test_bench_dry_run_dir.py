"""`dspark bench --dry-run` plans its paths where the run would write them: `hydra.run.dir` when
given (relative to the current directory, `~` and `${now:...}` filled in), the sweep's job
directory in a multirun, else where a real run started now writes (runs/bench/<time> under the
current directory); and it writes nothing."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from tests.conftest import run_dspark

BENCH = ["bench", "+hw=cpu", "--dry-run", "--json"]


def planned(tmp_path: Path, *args: str) -> dict:
    done = run_dspark(*BENCH, *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)



def test_the_given_run_dir_is_the_plans(tmp_path: Path) -> None:
    plan = planned(tmp_path, f"hydra.run.dir={tmp_path / 'b1'}")
    assert plan["run_dir"] == str(tmp_path / "b1")
    assert str(tmp_path / "b1" / "cells" / "none-c8") in json.dumps(plan)
    assert not (tmp_path / "b1").exists()


def test_a_relative_run_dir_with_a_time_stamp_is_under_the_cwd(tmp_path: Path) -> None:
    plan = planned(tmp_path, "hydra.run.dir=out/${now:%Y}")
    assert plan["run_dir"] == str(tmp_path / "out" / time.strftime("%Y"))


def test_without_one_the_plan_is_a_real_runs_and_nothing_is_written(tmp_path: Path) -> None:
    run_dir = planned(tmp_path)["run_dir"]
    assert re.fullmatch(re.escape(str(tmp_path / "runs" / "bench")) + r"/\d{8}-\d{6}", run_dir)
    assert list(tmp_path.iterdir()) == []


def test_a_multirun_dry_run_plans_each_job_in_the_sweep_dir(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    done = run_dspark("bench", "+hw=cpu", "--dry-run", "-m", "bench.concurrency=8,2",
                      f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"# run directory: {sweep / '0'}" in done.stdout
    assert f"# run directory: {sweep / '1'}" in done.stdout
