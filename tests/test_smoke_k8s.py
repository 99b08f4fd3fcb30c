"""`dspark smoke deploy=k8s` as a managed deployment: applied through `kubectl`, checked live,
deleted. No Kubernetes can run on this machine (no container runtime, no kubelet), so the cluster
is tests/doubles/fake_kubectl.py: the pods' container commands from the real manifests run here
as real processes (LWS's variables set: leader 127.0.0.1, worker index, group size), reached
through a real TCP port-forward. The "image" is a directory on PATH with its `vllm`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dspark_cli.server.process import free_port
from tests.conftest import LEAN_RANKS, dspark_argv, dspark_env, wait_until
from tests.doubles.fake_kubectl import install, processes, reap
from tests.foreground_serve import ForegroundServe

DIGEST = "registry.example/dspark-av@sha256:" + "49067946ae13f404" * 4


STATES: list[Path] = []


@pytest.fixture(autouse=True)
def _reap() -> Iterator[None]:
    """Whatever a failed test left on its fake cluster is killed."""
    yield
    while STATES:
        reap(STATES.pop())


def cluster_env(tmp_path: Path, vllm: str) -> tuple[dict[str, str], Path]:
    """The smoke's environment: the fake kubectl and the image's `vllm` first on PATH, a short
    TMPDIR (ZeroMQ's IPC paths must fit 107 bytes); and the fake cluster's state dir."""
    state = Path(tempfile.mkdtemp(prefix="kc-"))
    STATES.append(state)
    install(tmp_path / "kbin", state)
    image = tmp_path / "image"
    image.mkdir()
    (image / "vllm").write_text(f"#!/bin/bash\n{vllm}\n")
    (image / "vllm").chmod(0o755)
    env = dspark_env({"PATH": f"{tmp_path / 'kbin'}:{image}:{os.environ['PATH']}",
                      "TMPDIR": tempfile.mkdtemp(prefix="k8")})
    return env, state


def smoke(tmp_path: Path, env: dict[str, str], *overrides: str,
          timeout: float = 900) -> subprocess.CompletedProcess[str]:
    argv = dspark_argv("smoke", "+hw=cpu", "hw.nodes=2", "deploy=k8s", f"deploy.k8s.image={DIGEST}",
                       f"server.port={free_port()}", f"hw.dp_rpc_port={free_port()}",
                       f"hydra.run.dir={tmp_path / 'run'}", *overrides, "--json")
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=timeout)


def left_on(state: Path) -> tuple[list[dict], list[str]]:
    """The fake cluster's objects and the processes of its pods that are still there."""
    objects = json.loads((state / "objects.json").read_text())
    return objects, [p.cmdline for p in processes(state)]


@pytest.mark.vllm
def test_smoke_on_two_lws_pods_serves_from_both_engines_and_leaves_nothing(tmp_path):
    env, state = cluster_env(tmp_path, f'exec {sys.executable} -m dspark_cli.vllm.shim "$@"')
    done = smoke(tmp_path, env, "server.ready_timeout_s=600", *LEAN_RANKS)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["engines"]["status"] == "passed", checks["engines"]
    grown = report["counters"]["generation_tokens_by_engine"]
    assert set(grown) == {"0", "1"} and all(v > 0 for v in grown.values()), grown
    assert "kubectl port-forward service/dspark" in done.stderr
    assert left_on(state) == ([], [])
    run = tmp_path / "run"
    (lws,) = [o for o in yaml.safe_load_all((run / "manifests.yaml").read_text())
              if o["kind"] == "LeaderWorkerSet"]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2  # one group: leader and worker
    assert "[node 1] " in (run / "server.log").read_text()  # the worker's output, gathered
    # Both pods' servers ended on the delete: nothing left, the port free.
    teardown = checks["teardown"]
    assert teardown["status"] == "passed" and teardown["data"]["port_free"], teardown


@pytest.mark.vllm  # serve/smoke import vLLM here (exit 4 without it)
def test_a_crashing_leader_fails_the_smoke_with_exit_3_naming_the_pod(tmp_path):
    env, state = cluster_env(tmp_path, 'case " $* " in *" --headless "*) exec sleep 600;; esac\n'
                                       'echo "vllm: the model cannot be loaded" >&2; exit 1')
    done = smoke(tmp_path, env, "model.synthetic=null", timeout=180)
    assert done.returncode == 3, done.stderr[-4000:]
    assert "pod dspark-0: CrashLoopBackOff, last exit code 1" in done.stderr
    assert "Traceback" not in done.stderr
    assert left_on(state) == ([], [])


@pytest.mark.vllm  # serve/smoke import vLLM here (exit 4 without it)
def test_no_cluster_fails_the_smoke_with_exit_3_before_anything_is_applied(tmp_path):
    env, state = cluster_env(tmp_path, "exit 1")
    done = smoke(tmp_path, {**env, "FAKE_KUBECTL_UNREACHABLE": "1"}, "model.synthetic=null",
                 timeout=120)
    assert done.returncode == 3, done.stderr[-4000:]
    assert "no Kubernetes cluster answers kubectl" in done.stderr
    assert "was refused" in done.stderr and "Traceback" not in done.stderr
    assert not (state / "objects.json").exists()


def serve_apply(tmp_path: Path) -> tuple[ForegroundServe, Path, dict[str, str]]:
    """`dspark serve deploy=k8s --apply` started on the fake cluster. The image's `vllm` is
    fake_vllm (the head) and a sleeper (the headless worker), so no model loads."""
    fake = Path(__file__).resolve().parent / "doubles" / "fake_vllm.py"
    env, state = cluster_env(tmp_path, 'port=8000\nfor a in "$@"; do [ "$p" = --port ] && '
                                       'port=$a; p=$a; done\n'
                                       'case " $* " in *" --headless "*) exec sleep 600;; esac\n'
                                       f'exec {sys.executable} {fake} --port "$port"')
    argv = dspark_argv("serve", "+hw=cpu", "hw.nodes=2", "deploy=k8s", f"deploy.k8s.image={DIGEST}",
                       f"server.port={free_port()}", f"hw.dp_rpc_port={free_port()}",
                       "model.synthetic=null", f"hydra.run.dir={tmp_path / 'run'}", "--apply")
    return ForegroundServe(argv, tmp_path, env), state, env


@pytest.mark.vllm  # serve/smoke import vLLM here (exit 4 without it)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_serve_apply_follows_the_deployment_and_ctrl_c_or_hangup_deletes_it(tmp_path, sig):
    """Applied, ready through the port-forward, then SIGINT (or a hangup: a closed terminal)
    deletes it (exit 130) with nothing left."""
    serve, state, _ = serve_apply(tmp_path)
    try:
        url = serve.wait_ready(120)
        with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
            assert r.status == 200
        # the LeaderWorkerSet, its API Service and the LWS controller's headless Service
        assert sorted((o["kind"], o["metadata"]["name"]) for o in left_on(state)[0]) == [
            ("LeaderWorkerSet", "dspark"), ("Service", "dspark"), ("Service", "dspark-leader")]
    finally:
        serve.proc.send_signal(sig)
        code = serve.proc.wait(timeout=120)
    assert code == 130, serve.tail()
    assert left_on(state) == ([], [])
    assert (tmp_path / "run" / "manifests.yaml").is_file()


@pytest.mark.vllm  # serve/smoke import vLLM here (exit 4 without it)
def test_after_kill_9_the_run_record_names_the_objects_and_its_lines_delete_them(tmp_path):
    """No teardown runs after `kill -9`: deployment.json names what is applied and the shell
    lines that delete it; run as printed (bash), they leave nothing on the cluster."""
    serve, state, env = serve_apply(tmp_path)
    try:
        serve.wait_ready(120)
    finally:
        serve.proc.kill()
        serve.proc.wait(timeout=30)
    assert len(left_on(state)[0]) == 3  # with the LWS controller's headless Service
    record = json.loads((tmp_path / "run" / "deployment.json").read_text())
    assert record["deployment"] == "Kubernetes LeaderWorkerSet dspark, Service dspark-leader"
    manifest = tmp_path / "run" / "manifests.yaml"
    assert record["cancel"] == [f"kubectl delete -f {manifest}"]
    assert " && ".join(record["cancel"]) in serve.tail()
    for line in record["cancel"]:
        done = subprocess.run(["bash", "-c", line], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    # the port-forward and log followers dspark ran here end with it (their watchdogs)
    wait_until(lambda: left_on(state) == ([], []), 10, "nothing left on the cluster")


def test_apply_is_only_for_k8s(tmp_path):
    done = subprocess.run(dspark_argv("serve", "+hw=cpu", "--apply"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60,
                          env=cluster_env(tmp_path, "exit 1")[0])
    assert done.returncode == 2 and "--apply is for deploy=k8s" in done.stderr


@pytest.mark.vllm
def test_bench_runs_a_cell_as_its_own_deployment(tmp_path):
    """One bench cell on one pod (a Deployment): applied, measured from here through the
    port-forward, deleted before the cell's record is written."""
    env, state = cluster_env(tmp_path, f'exec {sys.executable} -m dspark_cli.vllm.shim "$@"')
    run = tmp_path / "run"
    done = subprocess.run(
        dspark_argv("bench", "bench=cpu", "bench.arm=none", "bench.concurrency=2",
                    "bench.warmups=[]", "bench.measured_prompts=8", "+hw=cpu", "deploy=k8s",
                    f"deploy.k8s.image={DIGEST}", f"server.port={free_port()}",
                    f"hydra.run.dir={run}", "--json"),
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    cell_dir = run / "cells" / "none-c2"
    cell = json.loads((cell_dir / "cell.json").read_text())
    assert cell["valid"], cell["reasons"]
    assert cell["total_output_tokens"] == cell["metrics_delta"]["generation_tokens"] == 8 * 32
    assert cell["teardown"]["deployment"] == "Deployment dspark, Service dspark"
    assert cell["teardown"]["deployment_gone"]
    assert "kind: Deployment" in (cell_dir / "manifests.yaml").read_text()
    assert "Application startup complete" in (cell_dir / "server.log").read_text()
    assert left_on(state) == ([], [])
