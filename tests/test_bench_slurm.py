"""`dspark bench` cells as real Slurm jobs (hydra/launcher=submitit_slurm) on the two-node test
cluster: the jobs run side by side on one host, each cell with its own port, all valid."""

from __future__ import annotations

import json
import subprocess

import pytest

from dspark_cli.server.process import free_port
from tests.conftest import dspark_argv, dspark_env, wait_until
from tests.slurm_cluster import QUEUE_POLL_S

pytestmark = [pytest.mark.slurm, pytest.mark.vllm]


def test_bench_cells_run_as_parallel_slurm_jobs_all_valid(slurm_cluster, tmp_path):
    port = free_port()
    sweep = tmp_path / "sweep"
    argv = dspark_argv("bench", "bench=cpu", "+hw=cpu", f"server.port={port}", "bench.warmups=[]",
                       "bench.measured_prompts=8", "-m", "bench.arm=none", "bench.concurrency=8,2",
                       "hydra/launcher=submitit_slurm", "hydra.launcher.timeout_min=30",
                       "hydra.sweeper.max_batch_size=null", f"hydra.sweep.dir={sweep}")
    env = dspark_env(slurm_cluster.env)
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    # One Slurm job per cell, each with its result (submitted as one job array).
    results = sorted(p.name for p in (sweep / ".submitit").glob("*/*_result.pkl"))
    assert len(results) == 2, results
    cells = [json.loads(p.read_text()) for p in sorted(sweep.rglob("cell.json"))]
    assert sorted(c["cell_id"] for c in cells) == ["none-c2", "none-c8"]
    assert all(c["valid"] for c in cells), [c["reasons"] for c in cells]
    urls = {c["launch"]["plan"]["base_url"] for c in cells}
    assert len(urls) == 2, urls  # side by side on one host: never the same port
    first, second = sorted(cells, key=lambda c: c["started_at"])
    assert second["started_at"] < first["finished_at"]  # they did run at the same time
    wait_until(lambda: slurm_cluster.jobs() == [], 60, "the jobs to leave the queue",
               poll_s=QUEUE_POLL_S)
