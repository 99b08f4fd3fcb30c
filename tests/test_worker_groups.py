"""`--dist loadgroup` with tests/worker_groups.py, in a real pytest run on two xdist workers: the
tests that ask for a shared session run go to one worker and the run happens once, while the
other tests still spread over both."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import dspark_env

CONFTEST = '''
import os, time
from pathlib import Path
import pytest
from tests import worker_groups

PATH = Path(os.environ["GROUPS_PATH"])

def pytest_configure(config):
    worker_groups.register(config, PATH)

def pytest_collection_modifyitems(config, items):
    worker_groups.record(config, items, PATH)

@pytest.fixture(scope="session")
def cpu_validate_run():
    with (PATH.parent / "runs").open("a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    time.sleep(0.5)
'''

TESTS = '''
import time
import pytest

@pytest.mark.parametrize("i", range(3))
def test_shared(cpu_validate_run, i):
    pass

@pytest.mark.parametrize("i", range(6))
def test_other(i):
    time.sleep(0.3)
'''


def test_the_tests_of_a_shared_run_share_one_worker_and_it_runs_once(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = dspark_env({"GROUPS_PATH": str(tmp_path / "groups.json")})
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
                           "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = {test: worker for worker, test in re.findall(
        r"\[(gw\d)\] \[ *\d+%\] PASSED \S+::(test_\w+\[\d\])", done.stdout)}
    assert len(ran) == 9, done.stdout
    assert len({ran[f"test_shared[{i}]"] for i in range(3)}) == 1
    assert (tmp_path / "runs").read_text().splitlines() == [ran["test_shared[0]"]]
    assert len(set(ran.values())) == 2  # the others still spread
