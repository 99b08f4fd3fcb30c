"""Managed `smoke` and `bench` past one process: on the real two-node Slurm of the tests
(tests/slurm_cluster.py) they submit the job themselves, check it from this host, and cancel it
until it has left the queue, both engines of a two-node job serving. A job that fails, and a
SIGTERM while the job waits, end in seconds with the job gone."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from dspark_cli.server.process import free_port
from tests.conftest import LEAN_RANKS, run_dspark, run_dspark_process, start_dspark, wait_until
from tests.smoke_support import checks, port_free, statuses
from tests.test_deploy_slurm import job_processes

SLURM = ("+hw=cpu", "deploy=slurm", "deploy.slurm.poll_s=0.5")
ONE_CELL = ("bench=cpu", "bench.arm=none", "bench.concurrency=2", "bench.warmups=[]",
            "bench.measured_prompts=8")


BOOT_S = 900  # one command that boots vLLM on the cluster, at most


def _job_of(stderr: str) -> str:
    line = next(ln for ln in stderr.splitlines() if "submitted Slurm job" in ln)
    return line.split("submitted Slurm job ")[1].split(";")[0]


@pytest.mark.slurm
@pytest.mark.vllm
def test_managed_smoke_on_two_slurm_nodes_checks_both_engines_and_cancels_the_job(
        slurm_cluster, short_dir):
    port, rpc = free_port(), free_port()
    done = run_dspark_process("smoke", *SLURM, "hw.nodes=2", *LEAN_RANKS,
                              f"server.port={port}", f"hw.dp_rpc_port={rpc}", "--json",
                              cwd=short_dir, env=slurm_cluster.env, timeout=BOOT_S)
    assert done.stdout.strip(), done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert done.returncode == 0, (report["verdict"], done.stderr[-3000:])
    job = _job_of(done.stderr)
    assert report["mode"] == "managed" and report["base_url"] == f"http://127.0.0.1:{port}"
    found = statuses(report)
    assert found.pop("vllm_accepts_command") == "skipped"  # it runs on the cluster's nodes
    found.pop("draft_params")
    assert set(found.values()) == {"passed"}, found
    by_engine = report["counters"]["generation_tokens_by_engine"]
    assert set(by_engine) == {"0", "1"} and by_engine["0"] > 0 and by_engine["1"] > 0
    teardown = checks(report)["teardown"]
    assert teardown["data"]["deployment"] == f"Slurm job {job}"
    assert teardown["data"]["deployment_gone"] and teardown["data"]["signal"] == "scancel"
    assert f"Slurm job {job} left the queue" in teardown["evidence"]
    assert slurm_cluster.jobs() == [] and job_processes(job) == []
    assert port_free(port) and port_free(rpc)
    run = Path(report["log"]).parent
    assert "#SBATCH --nodes=2" in (run / "job.sbatch").read_text()
    assert "EngineCore_DP1" in (run / "server.log").read_text()


@pytest.mark.slurm
@pytest.mark.vllm
def test_managed_bench_on_slurm_runs_a_cell_as_its_own_job(slurm_cluster, short_dir):
    """A bench cell is a deployment like any other (deploy/start.py): its job is submitted,
    measured from here, and gone before its record is written. One node: a job of two nodes,
    both engines serving and counted, starts through the same step in the managed smoke above
    (and a cell's two-node job script is rendered in the dry run below; a cell on two local
    nodes starts as the two-node smoke does, test_smoke_nodes)."""
    run = short_dir / "run"
    port = free_port()
    done = run_dspark_process("bench", *ONE_CELL, *SLURM, f"server.port={port}",
                              f"hydra.run.dir={run}", "--json", cwd=short_dir,
                              env=slurm_cluster.env, timeout=BOOT_S)
    assert done.returncode == 0, done.stderr[-4000:]
    job = _job_of(done.stderr)
    cell_dir = run / "cells" / "none-c2"
    cell = json.loads((cell_dir / "cell.json").read_text())
    assert cell["valid"], cell["reasons"]
    assert cell["total_output_tokens"] == cell["metrics_delta"]["generation_tokens"] == 8 * 32
    assert cell["teardown"]["deployment"] == f"Slurm job {job}"
    assert cell["teardown"]["deployment_gone"] and cell["teardown"]["port_free"]
    assert "#SBATCH --nodes=1" in (cell_dir / "job.sbatch").read_text()
    assert "Application startup complete" in (cell_dir / "server.log").read_text()
    assert slurm_cluster.jobs() == [] and job_processes(job) == []
    assert port_free(port)


@pytest.mark.slurm
@pytest.mark.vllm  # the tiny model is made with torch
def test_a_job_that_fails_ends_the_smoke_with_exit_3_naming_it(slurm_cluster, short_dir):
    started = time.monotonic()
    done = run_dspark_process("smoke", *SLURM, f"server.port={free_port()}",
                              "deploy.slurm.setup=[exit 7]", "--json", cwd=short_dir,
                              env=slurm_cluster.env, timeout=300)
    took = time.monotonic() - started
    assert done.stdout.strip(), done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert done.returncode == 3, (report["verdict"], done.stderr[-3000:])
    job = _job_of(done.stderr)
    health = checks(report)["health"]
    assert health["status"] == "failed"
    assert (f"Slurm job {job} FAILED (exit code 7:0) before /health answered 200"
            in health["evidence"])
    assert checks(report)["server_alive"]["status"] == "failed"
    teardown = checks(report)["teardown"]
    assert teardown["status"] == "passed" and teardown["data"]["signal"] == "exited"
    assert f"Slurm job {job}" in report["verdict"]["summary"]
    assert slurm_cluster.jobs() == [] and "Traceback" not in done.stderr
    assert took < 120, took  # the job's end is the verdict, not server.ready_timeout_s


@pytest.mark.slurm
@pytest.mark.vllm  # the tiny model is made with torch
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_hangup_while_the_job_runs_cancels_it(slurm_cluster, short_dir, sig):
    proc = start_dspark("smoke", *SLURM, f"server.port={free_port()}",
                        "deploy.slurm.setup=[sleep 600]", cwd=short_dir, env=slurm_cluster.env,
                        stderr=subprocess.PIPE)
    lines: list[str] = []

    def running() -> bool:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        lines.append(line)
        return " running" in line or proc.poll() is not None

    try:
        wait_until(running, 240, "the job to run", poll_s=0)
        assert proc.poll() is None, "".join(lines)
        job = _job_of("".join(lines))
        assert slurm_cluster.jobs() == [job]
        # should dspark be killed (no teardown), the run record names the job and its cancel
        (record,) = short_dir.rglob("deployment.json")
        assert json.loads(record.read_text()) == {"deployment": f"Slurm job {job}",
                                                  "cancel": [f"scancel {job}"]}
        proc.send_signal(sig)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(lines) + rest
    assert f"cancelling Slurm job {job}" in rest
    assert slurm_cluster.jobs() == [] and job_processes(job) == []


@pytest.mark.parametrize("target", ["slurm", "local"])
def test_bench_dry_run_prints_each_cells_launch_where_it_runs(target, tmp_path):
    done = run_dspark("bench", *ONE_CELL, "+hw=cpu", "hw.nodes=2", f"deploy={target}",
                      "--dry-run", "--commands", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    if target == "slurm":
        assert "# launch: a cold Slurm job for this cell" in done.stdout
        assert "#SBATCH --nodes=2" in done.stdout and "srun " in done.stdout
    else:
        assert "# launch: 2 cold nodes on this host for this cell" in done.stdout
    assert done.stdout.count("--headless") == 1 and "vllm bench serve" in done.stdout
    assert not (tmp_path / "runs").exists()
