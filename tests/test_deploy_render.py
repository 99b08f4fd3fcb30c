"""The sbatch script and the Kubernetes manifests rendered from a node layout: what each engine
needs is there, a head placeholder becomes the engine's address, secrets are referred to, and
the scripts run the right node's command for each rank (executed by a real bash)."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from dspark_cli.deploy.cluster import dispatch, shell_word
from dspark_cli.deploy.k8s.manifests import (
    CLEAN_SHM,
    IMAGE_UNSET,
    K8sSpec,
    image_problem,
    manifests,
    to_yaml,
)
from dspark_cli.deploy.k8s.validation import problems
from dspark_cli.deploy.slurm.job import SbatchSpec, sbatch_script
from dspark_cli.errors import UsageError
from dspark_cli.launch.layout import HEAD_ADDR, NodeLaunch, NodeLayout

DIGEST = "registry.example/vllm-rocm@sha256:" + "0123456789abcdef" * 4
COMMON = ("vllm", "serve", "/models/m", "--data-parallel-size", "2",
          "--data-parallel-size-local", "1", "--data-parallel-address", HEAD_ADDR,
          "--data-parallel-rpc-port", "13345", "--speculative-config",
          '{"method":"dspark","num_speculative_tokens":7}')
ENV = (("VLLM_USE_V2_MODEL_RUNNER", "1"), ("HF_TOKEN", "hf_secret_value"))


def dp_layout(gpus: int = 8) -> NodeLayout:
    return NodeLayout("dp", 2, gpus, (
        NodeLaunch(0, True, COMMON, dict(ENV), 8000),
        NodeLaunch(1, False, (*COMMON, "--headless", "--data-parallel-start-rank", "1"),
                   {**dict(ENV), "NODE_ONLY": "x y"}, None)))


def spec(**kw: object) -> K8sSpec:
    return K8sSpec(**{"name": "dsv4", "image": DIGEST, "platform": "rocm",
                      "model_path": "/models/m", **kw})


@pytest.mark.parametrize(("arg", "word"), [
    ("plain", "plain"), ("", "''"), ("a b", "'a b'"), (HEAD_ADDR, '"${DSPARK_HEAD_ADDR}"'),
    (f"tcp://{HEAD_ADDR}:1", 'tcp://"${DSPARK_HEAD_ADDR}":1'),
    (f"a b{HEAD_ADDR}", "'a b'\"${DSPARK_HEAD_ADDR}\""), ("$HOME", "'$HOME'"),
])
def test_shell_word(arg, word):
    assert shell_word(arg) == word


def run_dispatch(text: str, rank: str, head: str = "10.0.0.7") -> list[str]:
    """Run a dispatch with `exec` swapped for a printer of the argv it would exec."""
    script = "exec() { printf '%s\\n' \"$@\"; }\n" + text
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10,
                          env={**os.environ, "DSPARK_HEAD_ADDR": head, "RANK": rank,
                               "HF_TOKEN": "from-env"})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_dispatch_runs_each_ranks_command_with_the_head_address():
    layout = dp_layout()
    text = dispatch(layout, "$RANK", common_env=dict(ENV))
    head = ["vllm", "serve", "/models/m", "--data-parallel-size", "2",
            "--data-parallel-size-local", "1", "--data-parallel-address", "10.0.0.7",
            "--data-parallel-rpc-port", "13345", "--speculative-config",
            '{"method":"dspark","num_speculative_tokens":7}']
    assert run_dispatch(text, "0") == head
    assert run_dispatch(text, "1") == [*head, "--headless", "--data-parallel-start-rank", "1"]
    assert "export NODE_ONLY='x y'" in text and "VLLM_USE_V2_MODEL_RUNNER" not in text
    bad = subprocess.run(["bash", "-c", text], capture_output=True, text=True, timeout=10,
                         env={**os.environ, "RANK": "2"})
    assert bad.returncode == 64 and "no command for node rank 2" in bad.stderr


def test_sbatch_script_for_two_gpu_nodes():
    text = sbatch_script(dp_layout(), SbatchSpec("dsv4", "02:00:00", "gpu", "proj",
                                                 ("--exclusive",), ("module load rocm",)), ENV)
    lines = text.splitlines()
    sbatch = [ln for ln in lines if ln.startswith("#SBATCH")]
    assert sbatch == ["#SBATCH --job-name=dsv4", "#SBATCH --nodes=2",
                      "#SBATCH --ntasks-per-node=1", "#SBATCH --exclusive", "#SBATCH --mem=0",
                      "#SBATCH --export=ALL", "#SBATCH --gpus-per-node=8",
                      "#SBATCH --time=02:00:00", "#SBATCH --partition=gpu",
                      "#SBATCH --account=proj"]
    assert lines[0] == "#!/bin/bash"
    assert lines.index("module load rocm") < lines.index("export VLLM_USE_V2_MODEL_RUNNER=1")
    srun = [ln for ln in lines if ln.startswith("srun")]
    assert srun == ["srun --nodes=2 --ntasks=2 --ntasks-per-node=1 "
                    '--cpus-per-task="$node_cpus" --mem=0 --kill-on-bad-exit=1 '
                    "--export=ALL bash -c dspark_node"]
    assert 'case "$SLURM_NODEID" in' in text
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1' in text
    assert "hf_secret_value" not in text
    assert 'export HF_TOKEN="${HF_TOKEN:?set HF_TOKEN in the environment}"' in text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_sbatch_script_on_cpu_asks_for_no_gpus_and_leaves_out_unset_options():
    text = sbatch_script(dp_layout(0), SbatchSpec("d", "00:30:00", gpus=False), ENV)
    assert "--gpus-per-node" not in text
    assert "--partition" not in text and "--account" not in text


def test_lws_for_two_nodes_is_valid_and_complete():
    objects = manifests(dp_layout(), spec(), ENV)
    assert problems(objects) == []
    lws, service = objects
    assert (lws["apiVersion"], lws["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2 and template["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    for c in (leader, worker):
        assert c["image"] == DIGEST
        assert c["resources"]["limits"] == {"amd.com/gpu": "8"}
        assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
        assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": "dspark-secrets", "key": "HF_TOKEN"}}} in c["env"]
        assert 'export DSPARK_HEAD_ADDR="$LWS_LEADER_ADDRESS"' in c["command"][2]
        assert 'case "$LWS_WORKER_INDEX" in' in c["command"][2]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert leader[probe]["httpGet"] == {"path": "/health", "port": "http"}
        assert probe not in worker  # headless: no HTTP server to probe
    startup = leader["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 30 * 60
    volumes = {v["name"]: v for v in template["leaderTemplate"]["spec"]["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    assert volumes["model"]["hostPath"]["path"] == "/models/m"
    assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": "dsv4",
                                           "role": "leader"}
    assert service["spec"]["ports"][0]["port"] == 8000
    text = to_yaml(objects)
    assert list(yaml.safe_load_all(text)) == objects
    assert "hf_secret_value" not in text and "&id" not in text


def test_one_node_is_a_deployment_with_replicas_on_cuda_and_a_pvc():
    layout = NodeLayout("single", 1, 8, (NodeLaunch(0, True, COMMON[:3], {}, 8000),))
    deployment, service = manifests(layout, spec(platform="cuda", replicas=3, model_pvc="ckpt"),
                                    ())
    assert problems([deployment, service]) == []
    assert deployment["kind"] == "Deployment" and deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert pod["containers"][0]["command"] == ["/bin/bash", "-c",
                                               f"{CLEAN_SHM}\nexec vllm serve /models/m\n"]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert pod["volumes"][1]["persistentVolumeClaim"] == {"claimName": "ckpt", "readOnly": True}
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize(("image", "message"), [
    (None, "deploy.k8s.image is not set"),
    ("vllm/vllm-openai:latest", "not pinned by digest"),
    ("vllm/vllm-openai@sha256:abc", "not pinned by digest"),
    (DIGEST, None),
])
def test_an_unpinned_image_is_a_problem_the_manifests_still_show(image, message):
    problem = image_problem(image)
    assert problem is None if message is None else message in problem
    objects = manifests(dp_layout(), spec(image=image), ENV)
    assert problems(objects) == []
    leader = objects[0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert leader["image"] == (image or IMAGE_UNSET)


def test_a_hub_model_gets_no_model_volume_and_a_pvc_needs_a_path():
    layout = NodeLayout("single", 1, 8, (NodeLaunch(0, True, ("vllm", "serve", "org/m"), {},
                                                    8000),))
    deployment, _ = manifests(layout, spec(model_path="org/m"), ())
    pod = deployment["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["dshm"]
    assert [m["name"] for m in pod["containers"][0]["volumeMounts"]] == ["dshm"]
    with pytest.raises(UsageError, match="absolute path"):
        manifests(layout, spec(model_path="org/m", model_pvc="ckpt"), ())


@pytest.mark.parametrize(("kw", "message"), [
    ({"name": "DSpark_V4"}, "DNS label"),
    ({"model_pvc": "a", "model_host_path": "/b"}, "one model volume"),
    ({"replicas": 0}, "deploy.k8s.replicas"),
    ({"startup_failure_threshold": 0}, "deploy.k8s.startup_failure_threshold"),
])
def test_bad_k8s_settings_are_refused(kw, message):
    with pytest.raises(UsageError, match=message):
        manifests(dp_layout(), spec(**kw), ENV)


@pytest.mark.parametrize("name", ["1ENV", "A B", "A=B", "Ä"])
def test_an_environment_variable_kubernetes_refuses_is_refused(name):
    with pytest.raises(UsageError, match=f"{name!r}.*environment variable name"):
        manifests(dp_layout(), spec(), ((name, "x"),))


def test_dollar_parens_reach_the_container_as_written():
    """Kubernetes expands `$(VAR)` (and `$$`) in commands and env values: what dspark writes
    is escaped so the container gets the plan's text."""
    from tests.doubles.fake_kubectl import container_env, expand

    literal = "$(HOME) $$ $x ${y}"
    layout = NodeLayout("single", 1, 8, (NodeLaunch(0, True, (*COMMON[:3], "--tokenizer",
                                                              literal), {}, 8000),))
    deployment, _ = manifests(layout, spec(), (("ODD", literal),))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = container_env(container, {})
    assert env["ODD"] == literal
    command = [expand(c, {**env, "HOME": "/root"}) for c in container["command"]]
    assert run_dispatch(command[2], "0") == [*COMMON[:3], "--tokenizer", literal]
