"""run_dspark's fork server (tests/cli_server.py) gives what a fresh interpreter gives: the same
exit code, stdout and stderr, in the run's own cwd and environment, nothing kept between runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, dspark_argv, dspark_env, run_dspark

CASES = {
    "version": ["--version"],
    "unknown command": ["nope"],
    "bad hw": ["serve", "+hw=bogus", "--dry-run"],
    "relative path": ["report", "rel/dir", "--out", "x"],
    "bad value": ["serve", "+hw=mi350x", "serving.args.max_num_seqs=lots", "--dry-run"],
    "json dry run": ["serve", "+hw=mi350x", "--dry-run", "--json"],
}


@pytest.mark.parametrize("args", list(CASES.values()), ids=list(CASES))
def test_a_forked_run_is_a_fresh_interpreters_run(args: list[str], tmp_path: Path) -> None:
    forked = run_dspark(*args, cwd=tmp_path)
    fresh = subprocess.run(dspark_argv(*args), capture_output=True, text=True, cwd=tmp_path,
                           env=dspark_env(), timeout=120)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode, fresh.stdout, fresh.stderr)


def test_each_run_has_its_own_environment_and_cwd(tmp_path: Path) -> None:
    """A `${oc.env:}` the config reads sees this run's variable, not an earlier run's."""
    args = ["serve", "+hw=mi350x", "+hw.env.PROBE=${oc.env:DSK_PROBE,unset}", "--dry-run"]
    first = run_dspark(*args, env={"DSK_PROBE": "one"}, cwd=tmp_path)
    second = run_dspark(*args, cwd=REPO)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert "PROBE=one" in first.stdout and "PROBE=unset" in second.stdout
    assert "DSK_PROBE" not in os.environ


def test_a_run_past_its_timeout_is_killed(tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        run_dspark("serve", "+hw=mi350x", "--dry-run", cwd=tmp_path, timeout=0.01)
