"""The Slurm test cluster itself: two nodes that run one task each of a two-node job."""

from __future__ import annotations

import pytest

from tests.conftest import wait_until
from tests.slurm_cluster import QUEUE_POLL_S

pytestmark = pytest.mark.slurm


def test_two_idle_nodes_run_one_task_each(slurm_cluster, tmp_path):
    assert slurm_cluster.node_states() == {"n1": "idle", "n2": "idle"}
    out = tmp_path / "out.txt"
    submitted = slurm_cluster.run(
        "sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", f"--output={out}",
        "--wrap", "srun --ntasks=2 bash -c 'echo rank=$SLURM_NODEID node=$SLURMD_NODENAME'")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    wait_until(lambda: job not in slurm_cluster.jobs(), 30, f"job {job} to finish",
               poll_s=QUEUE_POLL_S)
    lines = sorted(line for line in out.read_text().splitlines() if line.startswith("rank="))
    assert lines == ["rank=0 node=n1", "rank=1 node=n2"]
