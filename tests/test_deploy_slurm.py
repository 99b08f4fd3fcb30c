"""`dspark serve deploy=slurm` on the real two-node Slurm (tests/slurm_cluster.py): the dry run
prints the job, a bad setting is refused before anything is submitted, and the real job serves
until SIGINT cancels it with nothing left behind (one node: a DP=2 job on both nodes, and both
its engines generating, is test_cluster_managed's managed smoke)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from dspark_cli.server.process import free_port
from tests.conftest import (
    compose_typed,
    dspark_argv,
    dspark_env,
    run_dspark,
    wait_until,
)
from tests.foreground_serve import ForegroundServe
from tests.slurm_cluster import NODE_CPUS, NODE_MEMORY_MB, QUEUE_POLL_S

TINY_OVERRIDES = ("+hw=cpu", "hw.nodes=2", "deploy=slurm")


def job_processes(job: str) -> list[list[str]]:
    """Command lines of live processes that a Slurm job started (its id in their environment)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if (p.environ().get("SLURM_JOB_ID") == job
                    and p.status() != psutil.STATUS_ZOMBIE):
                found.append(p.info["cmdline"])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_dry_run_prints_the_job_for_two_cpu_nodes():
    done = run_dspark("serve", *TINY_OVERRIDES, "deploy.slurm.partition=debug", "--dry-run")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("#!/bin/bash\n")
    assert "#SBATCH --nodes=2" in text and "#SBATCH --partition=debug" in text
    assert "--gpus-per-node" not in text  # a CPU platform asks for no GPUs
    assert text.count("exec vllm serve") == 2 and "--headless" in text
    assert '--data-parallel-address "${DSPARK_HEAD_ADDR}"' in text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_tp_across_nodes_gives_each_task_its_node_rank_and_the_head_as_master():
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "hw.layout=tp",
                      "hw.args.tensor_parallel_size=16", "deploy=slurm", "--dry-run")
    # (the exit code is the layout rules' business: the script is printed either way)
    text = done.stdout
    assert text.startswith("#!/bin/bash"), done.stderr
    assert "#SBATCH --gpus-per-node=8" in text
    assert text.count('--master-addr "${DSPARK_HEAD_ADDR}"') == 2
    assert "--node-rank 0" in text and "--node-rank 1" in text and "--nnodes 2" in text


@pytest.mark.slurm
@pytest.mark.vllm
def test_serve_on_slurm_answers_and_sigint_cancels_the_job(slurm_cluster, tmp_path):
    argv = dspark_argv("serve", "+hw=cpu", "deploy=slurm", f"server.port={free_port()}",
                       "deploy.slurm.poll_s=0.5", "server.ready_timeout_s=600",
                       f"hydra.run.dir={tmp_path / 'run'}")
    env = dspark_env(slurm_cluster.env)
    serve = ForegroundServe(argv, tmp_path, env)
    try:
        url = serve.wait_ready(900)
        job = next(ln for ln in serve.lines if "submitted Slurm job" in ln).split()[4].rstrip(";")
        assert slurm_cluster.jobs() == [job]
        reply = httpx.post(f"{url}/v1/completions", timeout=120, json={
            "model": "tiny", "prompt": "one two three", "max_tokens": 8, "temperature": 0,
            "ignore_eos": True})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 8
    finally:
        serve.proc.send_signal(signal.SIGINT)
        code = serve.proc.wait(timeout=120)
    assert code == 130, serve.tail()
    assert any(f"cancelling Slurm job {job}" in ln for ln in serve.lines)
    assert slurm_cluster.jobs() == []
    assert job_processes(job) == []
    script = (tmp_path / "run" / "job.sbatch").read_text()
    assert "#SBATCH --nodes=1" in script and Path(tmp_path / "run" / "config.yaml").is_file()


# What each node's server process sees: its CPUs (the affinity mask task/affinity set) and
# the memory its step was given on its node (what a cgroup would hold it to).
PROBE = """
import json, os, re, subprocess
step = subprocess.run(["scontrol", "show", "step",
                       os.environ["SLURM_JOB_ID"] + "." + os.environ["SLURM_STEP_ID"]],
                      capture_output=True, text=True).stdout
tres = dict(kv.split("=") for kv in re.search(r"TRES=(\\S+)", step).group(1).split(","))
print("PROBE " + json.dumps({"node": os.environ["SLURM_NODEID"],
                             "cpus": sorted(os.sched_getaffinity(0)),
                             "mem_mb": int(tres["mem"].rstrip("M")) // int(tres["node"])}))
"""


@pytest.mark.slurm
def test_each_nodes_server_gets_the_nodes_cpus_and_memory_on_a_site_like_slurm(
        slurm_cluster, tmp_path):
    """task/affinity with cores and CR_CPU_Memory (tests/slurm_cluster.py): without asking,
    a task is pinned to one CPU and given DefMemPerCPU's memory; dspark's job gives each
    node's command every CPU and all the memory of its node."""
    from dspark_cli.deploy.slurm.job import sbatch_script
    from dspark_cli.deploy.slurm.target import sbatch_spec
    from dspark_cli.launch.plan import build_plan

    cfg = compose_typed(list(TINY_OVERRIDES))
    plan = build_plan(cfg)
    layout = plan.layout
    probe = (sys.executable, "-c", PROBE)
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(layout, sbatch_spec(cfg), plan.env,
                                    {n.rank: probe for n in layout.launches}))
    out = tmp_path / "out.txt"
    submitted = slurm_cluster.run("sbatch", "--parsable", f"--output={out}", str(script))
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    wait_until(lambda: job not in slurm_cluster.jobs(), 60, f"job {job} to finish",
               poll_s=QUEUE_POLL_S)
    seen = {d["node"]: d for d in (json.loads(ln.split(" ", 1)[1])
                                   for ln in out.read_text().splitlines()
                                   if ln.startswith("PROBE "))}
    assert set(seen) == {"0", "1"}, out.read_text()
    for node in seen.values():
        assert len(node["cpus"]) == min(NODE_CPUS, os.cpu_count() or 1), node
        assert node["mem_mb"] == NODE_MEMORY_MB, node


def test_without_slurms_clients_serve_exits_2_before_writing_anything(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "bash").symlink_to("/bin/bash")
    run = tmp_path / "run"
    done = run_dspark("serve", *TINY_OVERRIDES, f"hydra.run.dir={run}",
                      env={"PATH": str(bare)})
    assert done.returncode == 2, done.stderr
    assert "`sbatch` is not on PATH" in done.stderr and "Traceback" not in done.stderr
    assert not (run / "job.sbatch").exists()


@pytest.mark.parametrize("command", ["smoke", "bench"])
def test_managed_smoke_and_bench_without_slurms_clients_exit_2_before_writing(command, tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "bash").symlink_to("/bin/bash")
    run = tmp_path / "run"
    extra = ("bench=cpu",) if command == "bench" else ()
    done = run_dspark(command, *TINY_OVERRIDES, *extra, f"hydra.run.dir={run}",
                      env={"PATH": str(bare)})
    assert done.returncode == 2, done.stderr
    assert "`sbatch` is not on PATH" in done.stderr and "Traceback" not in done.stderr
    assert not (run / "job.sbatch").exists() and not (run / "config.yaml").exists()


@pytest.mark.slurm
@pytest.mark.parametrize("command", ["smoke", "bench"])
def test_a_command_of_its_own_cannot_run_on_slurm(command, slurm_cluster, tmp_path):
    extra = ("bench=cpu",) if command == "bench" else ()
    done = run_dspark(command, *TINY_OVERRIDES, *extra, "server.command=[sleep,60]",
                      f"hydra.run.dir={tmp_path / 'run'}", env=slurm_cluster.env)
    assert done.returncode == 2, done.stderr
    assert "server.command replaces the command dspark starts on this host" in done.stderr
    assert slurm_cluster.jobs() == [] and "Traceback" not in done.stderr
