"""`dspark smoke deploy=k8s` as a managed deployment: applied through `kubectl`, checked live,
deleted. No Kubernetes can run on this machine (no container runtime, no kubelet), so the cluster
is tests/doubles/fake_kubectl.py: the pods' container commands from the real manifests run here
as real processes (LWS's variables set: leader 127.0.0.1, worker index, group size), reached
through a real TCP port-forward. The "image" is a directory on PATH with its `vllm`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO
from tests.doubles.fake_kubectl import install
from tests.doubles.fake_vllm import free_port

DIGEST = "registry.example/dspark-av@sha256:" + "49067946ae13f404" * 4


def cluster_env(tmp_path: Path, vllm: str) -> tuple[dict[str, str], Path]:
    """The smoke's environment: the fake kubectl and the image's `vllm` first on PATH, a short
    TMPDIR (ZeroMQ's IPC paths must fit 107 bytes); and the fake cluster's state dir."""
    state = Path(tempfile.mkdtemp(prefix="kc-"))
    install(tmp_path / "kbin", state)
    image = tmp_path / "image"
    image.mkdir()
    (image / "vllm").write_text(f"#!/bin/bash\n{vllm}\n")
    (image / "vllm").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path / 'kbin'}:{image}:{os.environ['PATH']}",
           "TMPDIR": tempfile.mkdtemp(prefix="k8"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return env, state


def smoke(tmp_path: Path, env: dict[str, str], *overrides: str,
          timeout: float = 900) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "dspark_cli.cli", "smoke", "+hw=cpu", "hw.nodes=2",
            "deploy=k8s", f"deploy.k8s.image={DIGEST}", f"server.port={free_port()}",
            f"hw.dp_rpc_port={free_port()}", f"hydra.run.dir={tmp_path / 'run'}", *overrides,
            "--json"]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=timeout)


def left_on(state: Path) -> tuple[list[dict], list[str]]:
    """The fake cluster's objects and the processes of its pods that are still there."""
    objects = json.loads((state / "objects.json").read_text())
    procs = [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])
             if str(state) in " ".join(p.info["cmdline"] or [])]
    return objects, procs


@pytest.mark.vllm
def test_smoke_on_two_lws_pods_serves_from_both_engines_and_leaves_nothing(tmp_path):
    env, state = cluster_env(tmp_path, f'exec {sys.executable} -m dspark_cli.vllm.shim "$@"')
    done = smoke(tmp_path, env, "server.ready_timeout_s=600")
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["engines"]["status"] == "passed", checks["engines"]
    grown = report["counters"]["generation_tokens_by_engine"]
    assert set(grown) == {"0", "1"} and all(v > 0 for v in grown.values()), grown
    assert "kubectl port-forward service/dspark" in done.stderr
    assert left_on(state) == ([], [])
    run = tmp_path / "run"
    assert "kind: LeaderWorkerSet" in (run / "manifests.yaml").read_text()
    assert "[node 1] " in (run / "server.log").read_text()  # the worker's output, gathered


def test_a_crashing_leader_fails_the_smoke_with_exit_3_naming_the_pod(tmp_path):
    env, state = cluster_env(tmp_path, 'case " $* " in *" --headless "*) exec sleep 600;; esac\n'
                                       'echo "vllm: the model cannot be loaded" >&2; exit 1')
    done = smoke(tmp_path, env, "model.synthetic=null", timeout=180)
    assert done.returncode == 3, done.stderr[-4000:]
    assert "pod dspark-0: CrashLoopBackOff, last exit code 1" in done.stderr
    assert "Traceback" not in done.stderr
    assert left_on(state) == ([], [])


def test_no_cluster_fails_the_smoke_with_exit_3_before_anything_is_applied(tmp_path):
    env, state = cluster_env(tmp_path, "exit 1")
    done = smoke(tmp_path, {**env, "FAKE_KUBECTL_UNREACHABLE": "1"}, "model.synthetic=null",
                 timeout=120)
    assert done.returncode == 3, done.stderr[-4000:]
    assert "no Kubernetes cluster answers kubectl" in done.stderr
    assert "was refused" in done.stderr and "Traceback" not in done.stderr
    assert not (state / "objects.json").exists()
