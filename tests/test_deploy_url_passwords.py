"""Secrets in a Slurm job or Kubernetes manifests: a password inside a URL (in a node's command
or a variable's value) and every secret-named variable become variable references; the value is
never printed or written, and the engine hands it to the job (Slurm: sbatch's environment;
Kubernetes: a Secret). Planted through every route tests/test_secrets.py uses, then looked for in
all output and every file; the rendered commands, run by a real bash with the variables set,
give vLLM the real values."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import dspark_argv, dspark_env, run_dspark, wait_until
from tests.doubles.fake_kubectl import container_env, expand
from tests.slurm_cluster import QUEUE_POLL_S
from tests.test_secrets import PLANTED

ARG_PASSWORD = "argpw-4b5c6d7e8f"  # in a node's command: --tokenizer URL
ENV_PASSWORD = "envpw-1f2e3d4c5b"  # in a variable's value: HTTPS_PROXY
ALL = [*PLANTED.values(), ARG_PASSWORD, ENV_PASSWORD]
IMAGE = "deploy.k8s.image=registry.example/vllm@sha256:" + "a" * 64
TOKENIZER = f"https://me:{ARG_PASSWORD}@hub.example/tok"
PROXY = f"http://p:{ENV_PASSWORD}@proxy.example:3128"


def overrides(target: str) -> list[str]:
    return ["+hw=mi350x", "hw.nodes=2", f"deploy={target}", IMAGE,
            *(f"{k}={v}" for k, v in PLANTED.items()),
            f"+serving.extra_args.tokenizer={TOKENIZER}", f"+hw.env.HTTPS_PROXY={PROXY}"]


def leaks(text: str) -> list[str]:
    return [v for v in ALL if v in text]


def files_under(root: Path) -> dict[str, str]:
    return {str(p): p.read_bytes().decode("utf-8", "replace")
            for p in root.rglob("*") if p.is_file()}


# What the submitting shell (Slurm) or the Secret (Kubernetes) holds: the real values, under
# the names the script and the manifests refer to.
SECRET_VALUES = {
    "HUGGING_FACE_HUB_TOKEN": PLANTED["+hw.env.HUGGING_FACE_HUB_TOKEN"],
    "MY_PASSWORD": PLANTED["+serving.env.MY_PASSWORD"],
    "Some_Credential": PLANTED["+model.env.Some_Credential"],
    "api_key_extra": PLANTED["+speculative.env.api_key_extra"],
    "db_secret": PLANTED["+compilation.env.db_secret"],
    "VLLM_API_KEY": PLANTED["+serving.extra_args.api_key"],
    "HF_TOKEN": PLANTED["+serving.extra_args.hf-token"],
    "DSPARK_URL_PASSWORD_1": ENV_PASSWORD,  # the env is named first, then the argv
    "DSPARK_URL_PASSWORD_2": ARG_PASSWORD,
}


def fake_bin(tmp_path: Path) -> Path:
    """`vllm` that prints its argv and the secrets' values it got; `srun` that runs every
    node's task in turn; `scontrol` that names node n1 at 10.1.2.3."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "vllm": 'printf "ARGV %s\\n" "$*"; printf "PROXY %s\\nKEY %s\\n" "$HTTPS_PROXY" '
                '"$VLLM_API_KEY"',
        "srun": 'for i in 0 1; do SLURM_NODEID=$i "${@: -3}" || exit $?; done',
        "scontrol": 'case "$2" in hostnames) echo n1;; node) echo "NodeName=n1 '
                    'NodeAddr=10.1.2.3";; esac',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def vllm_saw(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.startswith(("ARGV", "PROXY", "KEY"))]


@pytest.mark.parametrize("target", ["slurm", "k8s"])
@pytest.mark.parametrize("flag", [(), ("--json",)], ids=["text", "json"])
def test_a_dry_run_refers_to_every_secret_and_prints_none(target: str, flag: tuple) -> None:
    done = run_dspark("serve", *overrides(target), "--dry-run", *flag)
    assert done.returncode == 0, done.stderr
    assert leaks(done.stdout + done.stderr) == []
    assert "Traceback" not in done.stderr
    assert "https://me:${DSPARK_URL_PASSWORD_2}@hub.example/tok" in done.stdout


def test_the_sbatch_script_gives_vllm_the_real_values(tmp_path: Path) -> None:
    done = run_dspark("serve", *overrides("slurm"), "--dry-run")
    assert done.returncode == 0, done.stderr
    script = done.stdout
    assert '"https://me:${DSPARK_URL_PASSWORD_2}@hub.example/tok"' in script
    assert 'export HTTPS_PROXY="http://p:${DSPARK_URL_PASSWORD_1}@proxy.example:3128"' in script
    assert "#SBATCH --export=ALL" in script and "srun " in script
    assert "--export=ALL bash -c dspark_node" in script
    env = {"PATH": f"{fake_bin(tmp_path)}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_CPUS_PER_NODE": "2(x2)",
           **SECRET_VALUES}
    ran = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                         timeout=30)
    assert ran.returncode == 0, ran.stderr
    seen = vllm_saw(ran.stdout)
    assert len(seen) == 6, ran.stdout  # two nodes
    assert all(f"--tokenizer {TOKENIZER}" in ln for ln in seen if ln.startswith("ARGV"))
    assert seen.count(f"PROXY {PROXY}") == 2
    assert seen.count(f"KEY {SECRET_VALUES['VLLM_API_KEY']}") == 2
    # without the variable the job stops before vLLM, naming it
    missing = {k: v for k, v in env.items() if k != "DSPARK_URL_PASSWORD_2"}
    bad = subprocess.run(["bash", "-c", script], env=missing, capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode != 0 and "DSPARK_URL_PASSWORD_2" in bad.stderr
    assert vllm_saw(bad.stdout) == []


def test_the_lws_pods_get_the_real_values_from_the_secret(tmp_path: Path) -> None:
    done = run_dspark("serve", *overrides("k8s"), "--dry-run")
    assert done.returncode == 0, done.stderr
    header = [ln for ln in done.stdout.splitlines() if ln.startswith("#")]
    create = next(ln for ln in header if "kubectl create secret generic dspark-secrets" in ln)
    assert set(SECRET_VALUES) == {k for k in SECRET_VALUES if f"--from-literal={k}=" in create}
    assert "# DSPARK_URL_PASSWORD_2: the password in https://me:<redacted>@hub.example/tok" \
        in header
    lws, _ = yaml.safe_load_all(done.stdout)
    template = lws["spec"]["leaderWorkerTemplate"]
    bin_dir = fake_bin(tmp_path)
    for index, key in ((0, "leaderTemplate"), (1, "workerTemplate")):
        container = template[key]["spec"]["containers"][0]
        assert {"name": "DSPARK_URL_PASSWORD_2", "valueFrom": {"secretKeyRef": {
            "name": "dspark-secrets", "key": "DSPARK_URL_PASSWORD_2"}}} in container["env"]
        env = container_env(container, {"dspark-secrets": SECRET_VALUES})
        assert env["HTTPS_PROXY"] == PROXY  # $(DSPARK_URL_PASSWORD_1), expanded by Kubernetes
        command = [expand(c, env) for c in container["command"]]
        ran = subprocess.run(command, capture_output=True, text=True, timeout=30, env={
            **env, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LWS_LEADER_ADDRESS": "10.1.2.3",
            "LWS_WORKER_INDEX": str(index), "LWS_GROUP_SIZE": "2"})
        assert ran.returncode == 0, ran.stderr
        argv, proxy, key_line = vllm_saw(ran.stdout)
        assert f"--tokenizer {TOKENIZER}" in argv and "--data-parallel-address 10.1.2.3" in argv
        assert proxy == f"PROXY {PROXY}" and key_line == f"KEY {SECRET_VALUES['VLLM_API_KEY']}"


def test_written_manifests_hold_no_secret_and_stdout_says_how_to_make_the_secret(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = run_dspark("serve", *overrides("k8s"), f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert leaks(done.stdout + done.stderr) == []
    create, apply = done.stdout.strip().splitlines()
    assert create.startswith("kubectl create secret generic dspark-secrets --from-literal=")
    assert apply == f"kubectl apply -f {run / 'manifests.yaml'}"
    written = files_under(tmp_path)
    assert {str(run / "manifests.yaml"), str(run / "config.yaml")} <= set(written)
    assert {p: leaks(t) for p, t in written.items() if leaks(t)} == {}
    # the line is runnable: with the variables set, kubectl gets the real values
    echo = tmp_path / "echo-bin"
    echo.mkdir()
    (echo / "kubectl").write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    (echo / "kubectl").chmod(0o755)
    got = subprocess.run(["bash", "-c", create], capture_output=True, text=True, timeout=10,
                         env={"PATH": f"{echo}:{os.environ['PATH']}", **SECRET_VALUES})
    assert f"--from-literal=DSPARK_URL_PASSWORD_2={ARG_PASSWORD}" in got.stdout.splitlines()


def test_json_names_the_secrets_keys() -> None:
    done = run_dspark("serve", *overrides("k8s"), "--dry-run", "--json")
    out = json.loads(done.stdout)
    assert set(out["secret"]["keys"]) == set(SECRET_VALUES)
    assert out["secret"]["create"].startswith("kubectl create secret generic dspark-secrets")


def _sha(value: str) -> str:
    return hashlib.sha256(f"{value}\n".encode()).hexdigest()


@pytest.mark.slurm
@pytest.mark.vllm
def test_dspark_hands_the_secrets_to_sbatch_through_its_environment(slurm_cluster,
                                                                   tmp_path: Path) -> None:
    """The real Slurm job sees the values (its setup prints their SHA-256, then ends the job
    before vLLM); nothing dspark printed or wrote, the job's output included, holds one."""
    run = tmp_path / "run"
    shown = ",".join(f"'printenv {v} | sha256sum >&2'"
                     for v in ("DSPARK_URL_PASSWORD_1", "DSPARK_URL_PASSWORD_2", "HF_TOKEN"))
    argv = dspark_argv("serve", "+hw=cpu", "hw.nodes=2", "deploy=slurm",
                       f"+serving.extra_args.tokenizer={TOKENIZER}", f"+hw.env.HTTPS_PROXY={PROXY}",
                       f"+hw.env.HF_TOKEN={PLANTED['+serving.extra_args.hf-token']}",
                       f"deploy.slurm.setup=[{shown},'exit 3']", "deploy.slurm.poll_s=0.5",
                       f"hydra.run.dir={run}")
    env = dspark_env(slurm_cluster.env)
    for name in ("DSPARK_URL_PASSWORD_1", "DSPARK_URL_PASSWORD_2", "HF_TOKEN"):
        env.pop(name, None)  # only dspark may put them there
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 3, done.stderr
    assert leaks(done.stdout + done.stderr) == []
    written = files_under(tmp_path)
    assert {p: leaks(t) for p, t in written.items() if leaks(t)} == {}
    out = next(t for p, t in written.items() if Path(p).name == "server.log")  # the job's output
    for value in (ENV_PASSWORD, ARG_PASSWORD, PLANTED["+serving.extra_args.hf-token"]):
        assert _sha(value) in out, out
    wait_until(lambda: slurm_cluster.jobs() == [], 60, "the job to leave the queue",
               poll_s=QUEUE_POLL_S)


def test_each_local_nodes_block_demands_the_url_password_it_refers_to(tmp_path: Path) -> None:
    done = run_dspark("serve", "+hw=cpu", "hw.nodes=2",
                      f"+serving.extra_args.tokenizer={TOKENIZER}", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert leaks(done.stdout + done.stderr) == []
    blocks = done.stdout.split("\n\n")
    assert len(blocks) == 2
    env = {"PATH": f"{fake_bin(tmp_path)}:{os.environ['PATH']}", "DSPARK_HEAD_ADDR": "10.1.2.3"}
    for block in blocks:
        ran = subprocess.run(["bash", "-c", block], capture_output=True, text=True, timeout=10,
                             env={**env, "DSPARK_URL_PASSWORD_1": ARG_PASSWORD})
        assert f"--tokenizer {TOKENIZER}" in " ".join(vllm_saw(ran.stdout)), ran.stderr
        bad = subprocess.run(["bash", "-c", block], capture_output=True, text=True, timeout=10,
                             env=env)
        assert bad.returncode != 0 and "DSPARK_URL_PASSWORD_1" in bad.stderr
