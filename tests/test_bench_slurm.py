"""`dspark bench` cells as real Slurm jobs (hydra/launcher=submitit_slurm) on the two-node test
cluster: the jobs run side by side on one host, each cell with its own port, all valid. The
cells are none's and the prompt-lookup drafter's (ngram, whose pinned prompts repeat themselves
so it drafts): its engagement is read, not held to K, and the sweep's summary holds its greedy
tokens to none's from the other job (the session's validate grid runs the draft model's)."""

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
                       "bench.measured_prompts=8", "bench.arms=[none,ngram]",
                       "-m", "bench.arm=none,ngram", "bench.concurrency=8",
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
    assert sorted(c["cell_id"] for c in cells) == ["ngram-c8", "none-c8"]
    assert all(c["valid"] for c in cells), [c["reasons"] for c in cells]
    urls = {c["launch"]["plan"]["base_url"] for c in cells}
    assert len(urls) == 2, urls  # side by side on one host: never the same port
    first, second = sorted(cells, key=lambda c: c["started_at"])
    assert second["started_at"] < first["finished_at"]  # they did run at the same time
    (ngram,) = [c for c in cells if c["arm"] == "ngram"]
    # prompt lookup proposes up to K: its steps are held to no K, only read
    steps = ngram["engagement"]
    assert ngram["spec_decode"]["drafts"] > 0
    assert steps["expected"] == "at_most_k" and steps["ok"]
    assert steps["reported"] == 8 and steps["steps"] > 0
    # Its job had no none cell to compare with: the sweep's summary compares the two jobs'.
    assert ngram["lossless"]["comparison"] is None
    report = subprocess.run(dspark_argv("bench", "--report", str(sweep), "--json"), cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    out = json.loads(report.stdout)
    (table,) = [t for t in out["lossless"] if t["arm"] == "ngram"]
    assert (table["compared_by"], table["identical"], table["total"], table["share"],
            table["below"]) == ("token_ids", 8, 8, 1.0, [])
    assert out["counts"] == {"cells": 2, "valid": 2, "invalid": 0, "degraded": 0}
    wait_until(lambda: slurm_cluster.jobs() == [], 60, "the jobs to leave the queue",
               poll_s=QUEUE_POLL_S)
