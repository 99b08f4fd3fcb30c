"""A managed Kubernetes deployment (`deploy/k8s/run.py`) through `kubectl`, on a fake one-host
cluster: no Kubernetes can run on this machine (no container runtime, no kubelet), so
tests/doubles/fake_kubectl.py plays the API server and the kubelet with real processes, real
TCP and kubectl's own output. The "image" is a directory on PATH whose `vllm` is a real HTTP
server (tests/doubles/fake_vllm.py) for the head and a sleeper for a headless worker."""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path

import pytest

from dspark_cli.deploy.k8s.run import kubernetes_run, pod_problem
from dspark_cli.deploy.k8s.target import k8s_spec
from dspark_cli.errors import ServerError, UsageError
from dspark_cli.launch.plan import build_plan
from dspark_cli.server.process import free_port
from tests.conftest import compose_typed, run_dspark, wait_until
from tests.doubles.fake_kubectl import install, processes, reap

FAKE_VLLM = Path(__file__).resolve().parent / "doubles" / "fake_vllm.py"
DIGEST = "registry.example/dspark-av@sha256:" + "5" * 64


def image_bin(path: Path, leader: str = "serve") -> Path:
    """The image's `vllm`: the head serves (fake_vllm) or exits 1 (`leader="crash"`); a
    headless worker says so and sleeps."""
    path.mkdir(parents=True, exist_ok=True)
    head = ('echo "vllm: cannot load the model" >&2; exit 1' if leader == "crash" else
            f'exec {sys.executable} {FAKE_VLLM} --port "$port" --boot-delay 0.5')
    (path / "vllm").write_text(f"""#!/bin/bash
port=8000
for a in "$@"; do [ "$prev" = --port ] && port=$a; prev=$a; done
case " $* " in *" --headless "*) echo "headless worker up: $*"; exec sleep 600;; esac
{head}
""")
    (path / "vllm").chmod(0o755)
    return path


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """PATH with the fake kubectl and the image's `vllm`; the fake cluster's state dir."""
    state = tmp_path / "cluster"
    install(tmp_path / "kbin", state)
    monkeypatch.setenv("PATH", f"{tmp_path / 'kbin'}:{tmp_path / 'image'}:{os.environ['PATH']}")
    yield state
    reap(state)  # never leave a pod behind, whatever failed


def run_for(tmp_path: Path, *overrides: str):  # type: ignore[no-untyped-def]
    cfg = compose_typed(["+hw=cpu", "hw.nodes=2", "deploy=k8s", f"deploy.k8s.image={DIGEST}",
                          f"server.port={free_port()}", f"hw.dp_rpc_port={free_port()}",
                          *overrides])
    plan = build_plan(cfg)
    return kubernetes_run(plan, k8s_spec(cfg), tmp_path / "run",
                          stop_timeout_s=30.0)


def pods_left(state: Path) -> list[str]:
    return [p.cmdline for p in processes(state)]


def test_a_run_is_applied_followed_forwarded_and_deleted(tmp_path: Path, cluster: Path) -> None:
    image_bin(tmp_path / "image")
    run = run_for(tmp_path, "+hw.env.HF_TOKEN=hf-run-secret-123456")
    run.start()
    manifest = (tmp_path / "run" / "manifests.yaml").read_text()
    assert "kind: LeaderWorkerSet" in manifest and "hf-run-secret" not in manifest
    wait_until(lambda: run.base_url() or run.ended(), 60, "the port-forward")
    assert run.ended() is None, run.ended()
    url = run.base_url()
    assert url and url.startswith("http://127.0.0.1:")
    wait_until(lambda: _health(url) == 200 or run.ended(), 60, "/health through the forward")
    assert _health(url) == 200
    wait_until(lambda: "[node 1] headless worker up" in run.log_path.read_text(), 30,
               "the worker's log")
    wait_until(lambda: "\nINFO" in "\n" + run.log_path.read_text(), 30,
               "the leader's log, its lines unprefixed")
    assert "dspark-0" in run.describe() and "dspark-0-1 Running" in run.describe()
    pods = {p.pod for p in processes(cluster)} - {None}
    assert pods == {f"{cluster}/dspark-0", f"{cluster}/dspark-0-1"}
    teardown = run.stop()
    assert teardown.clean and teardown.deployment_gone, teardown
    assert pods_left(cluster) == []
    assert _health(url) is None  # the forward is gone too
    every = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()
                    and cluster not in p.parents)
    assert "hf-run-secret-123456" not in every


def test_a_service_named_like_the_lws_breaks_the_group(tmp_path: Path, cluster: Path) -> None:
    """The LWS controller makes the headless Service that LWS_LEADER_ADDRESS resolves through
    under the LWS's own name, only if no Service has it: a Service of that name (dspark's old
    naming) leaves the group crash-looping. dspark's API Service is NAME-leader."""
    image_bin(tmp_path / "image")
    run = run_for(tmp_path)
    lws, service = run.objects
    assert service["metadata"]["name"] == "dspark-leader" != lws["metadata"]["name"]
    service["metadata"]["name"] = run.service = lws["metadata"]["name"]  # the old naming
    run.start()
    wait_until(lambda: run.ended(), 30, "the group to crash-loop")
    reason = str(run.ended())
    assert reason.startswith("pod dspark-0") and "CrashLoopBackOff" in reason, reason
    assert "dspark-0.dspark.default does not resolve" in reason
    assert run.stop().deployment_gone and pods_left(cluster) == []


def test_the_pods_get_a_dev_shm_of_their_own(tmp_path: Path, cluster: Path) -> None:
    """The fake kubelet mounts the memory-backed emptyDir as the pod's own tmpfs, so the
    container's stale-/dev/shm cleanup never touches this host's /dev/shm."""
    image_bin(tmp_path / "image")
    host_file = Path("/dev/shm") / f"dspark-test-{os.getpid()}"
    host_file.write_text("the host's")
    try:
        run = run_for(tmp_path)
        run.start()
        wait_until(lambda: run.base_url() or run.ended(), 60, "the port-forward")
        assert run.ended() is None, run.ended()
        assert host_file.read_text() == "the host's"
        assert run.stop().deployment_gone
    finally:
        host_file.unlink()


def test_a_crashing_leader_ends_the_run_naming_the_pod(tmp_path: Path, cluster: Path) -> None:
    image_bin(tmp_path / "image", leader="crash")
    run = run_for(tmp_path)
    run.start()
    wait_until(lambda: run.ended(), 30, "the crash to be seen")
    reason = run.ended()
    assert reason is not None and reason.startswith("pod dspark-0: CrashLoopBackOff")
    assert "last exit code 1" in reason
    assert run.stop().deployment_gone and pods_left(cluster) == []


def test_an_image_that_cannot_be_pulled_ends_the_run(tmp_path: Path, cluster: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    image_bin(tmp_path / "image")
    monkeypatch.setenv("FAKE_KUBECTL_MISSING_IMAGES", DIGEST)
    run = run_for(tmp_path)
    run.start()
    wait_until(lambda: run.ended(), 30, "the pull failure to be seen")
    assert "ImagePullBackOff" in str(run.ended()) and "pod dspark-0" in str(run.ended())
    assert run.base_url() is None
    assert run.stop().deployment_gone


def test_no_cluster_is_a_server_error_and_nothing_is_applied(tmp_path: Path, cluster: Path,
                                                              monkeypatch) -> None:
    monkeypatch.setenv("FAKE_KUBECTL_UNREACHABLE", "1")
    run = run_for(tmp_path)
    with pytest.raises(ServerError, match="no Kubernetes cluster answers kubectl"):
        run.start()
    assert not (tmp_path / "run" / "manifests.yaml").exists()


def test_no_kubectl_is_a_usage_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    run = run_for(tmp_path)
    with pytest.raises(UsageError, match="`kubectl` is not on PATH"):
        run.start()


def test_an_unpinned_image_is_refused_before_anything(tmp_path: Path, cluster: Path) -> None:
    """The preflight checks the pin (once: `kubernetes_run` trusts it); nothing is applied."""
    done = run_dspark("smoke", "+hw=cpu", "hw.nodes=2", "deploy=k8s",
                      "deploy.k8s.image=vllm/vllm-openai:latest",
                      f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "k8s-image-pinned FAILED" in done.stderr and "deploy.k8s.image" in done.stderr
    assert pods_left(cluster) == [] and not (tmp_path / "run" / "manifests.yaml").exists()


@pytest.mark.parametrize(("status", "reason"), [
    ({"phase": "Pending"}, None),
    ({"phase": "Running", "containerStatuses": [{"state": {"running": {}}, "ready": True}]},
     None),
    ({"phase": "Running", "containerStatuses": [{"state": {"waiting": {
        "reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 139}},
        "restartCount": 3}]}, "pod p: CrashLoopBackOff, last exit code 139"),
    ({"phase": "Pending", "containerStatuses": [{"state": {"waiting": {
        "reason": "ContainerCreating"}}}]}, None),
    ({"phase": "Pending", "containerStatuses": [{"state": {"waiting": {
        "reason": "ErrImagePull", "message": "not found"}}}]}, "pod p: ErrImagePull: not found"),
    ({"phase": "Running", "containerStatuses": [{"state": {"terminated": {
        "reason": "Error", "exitCode": 1}}}]}, "pod p: container terminated (Error, last exit"),
    ({"phase": "Running", "containerStatuses": [{"state": {"running": {}},
                                                 "restartCount": 1}]}, "restarted 1 time"),
    ({"phase": "Failed", "reason": "Evicted"}, "pod p failed (Evicted)"),
])
def test_pod_problem(status: dict, reason: str | None) -> None:
    found = pod_problem({"metadata": {"name": "p"}, "status": status})
    assert found is None if reason is None else reason in str(found)


def _health(url: str) -> int | None:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status
    except OSError:
        return None
