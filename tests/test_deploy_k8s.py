"""`dspark serve deploy=k8s`: the manifests printed for a real profile, validated offline. The
LeaderWorkerSet's leader and worker commands run for real (with the variables LWS injects, the
tiny model as one DP=2 deployment whose engines both generate) in test_smoke_k8s.py's smoke on
two LWS pods."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dspark_cli.deploy.k8s.validation import problems
from tests.conftest import run_dspark

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
    assert done.stdout.strip() == f"kubectl apply -f {shlex.quote(str(path))}"
    assert problems(list(yaml.safe_load_all(path.read_text()))) == []


def test_the_api_service_is_not_named_like_the_lws():
    """LWS makes its headless Service (what LWS_LEADER_ADDRESS resolves through) under the
    LWS's own name, only if no Service has it: dspark's Service must leave it free."""
    lws, service = manifests("+hw=mi350x", "hw.nodes=2", "deploy.k8s.name=dsv4")
    assert lws["metadata"]["name"] == "dsv4" and service["metadata"]["name"] == "dsv4-leader"
    assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": "dsv4",
                                           "role": "leader"}


def containers(objects: list[dict]) -> list[dict]:
    workload = objects[0]["spec"]
    templates = ([workload["leaderWorkerTemplate"][k] for k in ("leaderTemplate",
                                                                "workerTemplate")]
                 if "leaderWorkerTemplate" in workload else [workload["template"]])
    return [t["spec"]["containers"][0] for t in templates]


@pytest.mark.parametrize(("overrides", "requests"), [
    (("+hw=mi350x", "hw.nodes=2"), {"amd.com/gpu": "8", "cpu": "96", "memory": "1000Gi"}),
    (("+hw=h200",), {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1000Gi"}),
    (("+hw=h200", "deploy.k8s.cpu=120", "deploy.k8s.memory=1800Gi"),
     {"nvidia.com/gpu": "8", "cpu": "120", "memory": "1800Gi"}),
    (("+hw=h200", "hw.node_cpus=64", "hw.node_memory=512Gi"),
     {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi"}),
    (("+hw=cpu", "hw.nodes=2"), {"cpu": "2", "memory": "8Gi"}),
])
def test_pods_request_cpu_and_memory_beside_the_gpus(overrides, requests):
    objects = manifests(*overrides)
    assert problems(objects) == []
    for container in containers(objects):
        assert container["resources"]["requests"] == requests
        gpus = {k: v for k, v in requests.items() if k.endswith("/gpu")}
        assert container["resources"].get("limits", {}) == gpus


def test_the_cross_node_interfaces_are_settings_set_only_when_given():
    plain = manifests("+hw=mi350x", "hw.nodes=2")
    for container in containers(plain):
        assert not {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"} & {e["name"]
                                                                   for e in container["env"]}
    both = manifests("+hw=mi350x", "hw.nodes=2", "deploy.k8s.nccl_socket_ifname=ib0",
                     "deploy.k8s.gloo_socket_ifname=eth0", "+hw.env.NCCL_SOCKET_IFNAME=eth9")
    assert problems(both) == []
    for container in containers(both):
        names = [e["name"] for e in container["env"]]
        assert names.count("NCCL_SOCKET_IFNAME") == 1  # the setting takes the variable's place
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["NCCL_SOCKET_IFNAME"] == "ib0" and env["GLOO_SOCKET_IFNAME"] == "eth0"


def test_a_one_node_gpu_deployment_rolls_without_twice_its_gpus():
    deployment, _ = manifests("+hw=h200")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize(("override", "key"), [
    ("deploy.k8s.name=0dspark", "deploy.k8s.name"),
    ("deploy.k8s.name=dspark.v4", "deploy.k8s.name"),
    ("deploy.k8s.namespace=Prod", "deploy.k8s.namespace"),
    ("deploy.k8s.namespace=a.b", "deploy.k8s.namespace"),
    ("deploy.k8s.secret_name=my_secrets", "deploy.k8s.secret_name"),
    ("deploy.k8s.model_pvc=Ckpt", "deploy.k8s.model_pvc"),
    ("deploy.k8s.shm_size=lots", "deploy.k8s.shm_size"),
    ("deploy.k8s.shm_size=64GB", "deploy.k8s.shm_size"),
    ("deploy.k8s.shm_size=0", "deploy.k8s.shm_size"),
    ("deploy.k8s.cpu=many", "deploy.k8s.cpu"),
    ("deploy.k8s.memory=-1Gi", "deploy.k8s.memory"),
    ("hw.node_memory=1TB", "deploy.k8s.memory"),
    ("deploy.k8s.replicas=2147483648", "deploy.k8s.replicas"),
    ("deploy.k8s.replicas=1000001", "deploy.k8s.replicas"),  # the LWS CRD's maximum
    ("deploy.k8s.probe_timeout_s=2147483648", "deploy.k8s.probe_timeout_s"),
    ("deploy.k8s.model_host_path=models/dsv4", "deploy.k8s.model_host_path"),
    ("deploy.k8s.model_host_path=/models/../etc", "deploy.k8s.model_host_path"),
    ("+deploy.k8s.node_selector.gpu=a/b", "deploy.k8s.node_selector.gpu"),
])
def test_values_the_api_server_would_refuse_exit_2_before_printing(override, key):
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "deploy=k8s",
                      f"deploy.k8s.image={IMAGE}", override, "--dry-run")
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert key in done.stderr, done.stderr


def test_a_replica_count_past_int32_is_refused_for_a_deployment_too():
    done = run_dspark("serve", "+hw=h200", "deploy=k8s", f"deploy.k8s.image={IMAGE}",
                      "deploy.k8s.replicas=2147483648", "--dry-run")
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert "deploy.k8s.replicas" in done.stderr


def _run_in_pod(command: list[str], tmp_path: Path, env: dict[str, str]) -> str:
    """The container's command as the kubelet runs it: a fresh tmpfs at /dev/shm (the pod's
    emptyDir) that already holds what a previous container of the pod left there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "vllm").write_text("#!/bin/sh\nls -A /dev/shm\n")
    (bin_dir / "vllm").chmod(0o755)
    inner = 'mount -t tmpfs tmpfs /dev/shm && touch /dev/shm/stale-segment && exec "$@"'
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "/bin/sh",
                           "-c", inner, "pod", *command], capture_output=True, text=True,
                          timeout=30, env={**env, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(subprocess.run(["unshare", "--mount", "true"], capture_output=True)
                    .returncode != 0, reason="needs a mount namespace (root) for a pod's tmpfs")
def test_stale_dev_shm_is_cleaned_when_the_container_starts(tmp_path):
    deployment, _ = manifests("+hw=h200")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    pod_env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "HOME": "/root"}
    assert _run_in_pod(command, tmp_path, pod_env) == ""  # vllm found /dev/shm empty
    # the same text run outside a pod leaves the directory alone
    assert _run_in_pod(command, tmp_path, {"HOME": "/root"}) == "stale-segment\n"


def test_printed_kubectl_lines_are_shell_safe(tmp_path):
    """The lines to paste, run by bash as printed, give kubectl the run directory as one word
    and never run what its name holds."""
    marker = tmp_path / "X"
    run = tmp_path / f"run dir $(touch {marker}) `touch {marker}`"
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "deploy=k8s",
                      f"deploy.k8s.image={IMAGE}", "deploy.k8s.namespace=team-a",
                      "+hw.env.HF_TOKEN=hf_from_the_plan", f"hydra.run.dir='{run}'",
                      cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and not marker.exists()
    stub = tmp_path / "stub"
    stub.mkdir()
    log = tmp_path / "argv.jsonl"
    (stub / "kubectl").write_text(f"#!{sys.executable}\nimport json, sys\n"
                                  f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + "
                                  "'\\n')\n")
    (stub / "kubectl").chmod(0o755)
    ran = subprocess.run(["bash", "-euc", "\n".join(lines)], capture_output=True, text=True,
                         timeout=30, cwd=tmp_path,
                         env={**os.environ, "PATH": f"{stub}:{os.environ['PATH']}",
                              "HF_TOKEN": "hf_in_my_shell"})
    assert ran.returncode == 0, ran.stderr
    assert not marker.exists()
    create, apply = (json.loads(ln) for ln in log.read_text().splitlines())
    assert create == ["create", "secret", "generic", "dspark-secrets", "--namespace", "team-a",
                      "--from-literal=HF_TOKEN=hf_in_my_shell"]
    assert apply == ["apply", "-f", str(run / "manifests.yaml")]
    assert (run / "manifests.yaml").is_file()
