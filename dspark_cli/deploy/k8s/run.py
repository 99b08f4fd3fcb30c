"""A managed Kubernetes deployment for one `serve --apply`, `smoke` or `bench` session (a
`Deployment`, `server/deployment.py`), through `kubectl` with the user's kubeconfig and context.

`start()` writes the manifests to the run directory and applies them (the plan's secrets go
into a Secret of the run's own, applied from stdin, never written); the pods' status
(`kubectl get pods -o json`, read by `pod_problem` and its neighbours, pure) says whether the
deployment still runs: a container waiting in CrashLoopBackOff, ImagePullBackOff and the like, a
terminated or restarted container, or pods that vanished end it with the pod's name and reason.
Each running pod's output is followed (`kubectl logs --follow`) into `log_path` (a worker's
lines start with `[node N] `, as for local nodes); the head is reached through `kubectl
port-forward service/NAME :PORT`, whose "Forwarding from 127.0.0.1:N" line gives the base URL.
`stop()` deletes everything it applied (`kubectl delete --wait`) and confirms nothing is left.

Every kubectl API call has a timeout (kubectl's own `--request-timeout` and ours around the
process), and the long-running calls (logs --follow, port-forward) are processes the caller
stops with `stop_stream`.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from dspark_cli.console import progress
from dspark_cli.deploy.cluster import record_deployment, secret_environment, url_refs
from dspark_cli.deploy.k8s.manifests import INSTANCE_LABEL, K8sSpec, manifests, to_yaml
from dspark_cli.deploy.k8s.validation import require_valid_manifests
from dspark_cli.errors import ServerError, UsageError
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.paths import MANIFESTS_YAML, SERVER_LOG
from dspark_cli.server import watchdog
from dspark_cli.server.deployment import Deployment
from dspark_cli.server.process import Teardown
from dspark_cli.server.watchdog import descendants, stop_group

# -- the kubectl client ----------------------------------------------------------------------
REQUEST_TIMEOUT_S = 30.0  # one API call
STREAM_GRACE_S = 5.0  # a stream's SIGTERM before SIGKILL
CONNECT_TIMEOUT_S = 15.0  # `kubectl version` at start: does a cluster answer?
NO_KUBECTL = ("`kubectl` is not on PATH: deploy=k8s runs the deployment through kubectl with "
              "your kubeconfig and context; nothing was applied")


@dataclass(frozen=True)
class Kubectl:
    """The `kubectl` client with the user's kubeconfig and context, in one namespace."""

    namespace: str | None = None

    def argv(self, *args: str) -> list[str]:
        ns = ["--namespace", self.namespace] if self.namespace else []
        return ["kubectl", *ns, *args]

    @staticmethod
    def require() -> None:
        """UsageError when `kubectl` is not on PATH."""
        if shutil.which("kubectl") is None:
            raise UsageError(NO_KUBECTL, hint="install kubectl and select the cluster's "
                             "context, or print the manifests with `dspark serve deploy=k8s "
                             "--dry-run`")

    def run(self, *args: str, stdin: str | None = None, timeout: float = REQUEST_TIMEOUT_S,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """One API call, bounded by `timeout` (kubectl's own and ours)."""
        argv = self.argv(f"--request-timeout={max(1, int(timeout))}s", *args)
        try:
            done = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                                  timeout=timeout + 10)
        except FileNotFoundError as e:
            raise UsageError(NO_KUBECTL) from e
        except subprocess.TimeoutExpired as e:
            raise ServerError(f"`kubectl {' '.join(args[:2])}` did not answer within "
                              f"{timeout:.0f} s; is the cluster reachable?") from e
        if check and done.returncode != 0:
            raise ServerError(f"`kubectl {' '.join(args[:3])}` failed (exit {done.returncode}): "
                              f"{(done.stderr or done.stdout).strip()}")
        return done

    def stream(self, *args: str) -> subprocess.Popen[str]:
        """A long-running call (logs --follow, port-forward); the caller stops it, and its
    watchdog should dspark die."""
        self.require()
        return watchdog.popen(self.argv(*args), STREAM_GRACE_S, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def k8s_delete(kubectl_argv: Sequence[str], manifest: Path, secret: str | None) -> list[str]:
    """`kubectl_argv`: the client's `kubectl [--namespace NS]` prefix."""
    lines = [shlex.join([*kubectl_argv, "delete", "-f", str(manifest)])]
    if secret is not None:
        lines.append(shlex.join([*kubectl_argv, "delete", "secret", secret]))
    return lines


def stop_stream(proc: subprocess.Popen[str] | None, grace_s: float = STREAM_GRACE_S) -> None:
    """End a `stream()` call: SIGTERM, then SIGKILL after `grace_s`."""
    if proc is None or proc.poll() is not None:
        return
    stop_group(proc.pid, grace_s, descendants(proc.pid))
    proc.wait(grace_s)


# -- a pod's status -------------------------------------------------------------------------
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
# A container waiting for one of these will not run without a change: the deployment ended.
STUCK = {"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
         "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}


def pod_problem(pod: dict[str, Any]) -> str | None:
    """Why a pod stopped serving, or None while it is pending or running."""
    name = pod.get("metadata", {}).get("name", "?")
    status = pod.get("status", {})
    if status.get("phase") == "Failed":
        return f"pod {name} failed ({status.get('reason') or status.get('message') or 'Failed'})"
    for c in status.get("containerStatuses", []):
        state, last = c.get("state", {}), c.get("lastState", {})
        exit_code = (last.get("terminated") or state.get("terminated") or {}).get("exitCode")
        exited = f", last exit code {exit_code}" if exit_code is not None else ""
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in STUCK:
            message = f": {waiting['message']}" if waiting.get("message") else ""
            return f"pod {name}: {waiting['reason']}{exited}{message}"
        if "terminated" in state:
            t = state["terminated"]
            return f"pod {name}: container terminated ({t.get('reason', '?')}{exited})"
        if int(c.get("restartCount") or 0) > 0:
            return f"pod {name}: container restarted {c['restartCount']} time(s){exited}"
    return None


def pod_line(pod: dict[str, Any]) -> str:
    """`name phase[ ready]` for progress."""
    status = pod.get("status", {})
    ready = all(c.get("ready") for c in status.get("containerStatuses", [])) and bool(
        status.get("containerStatuses"))
    return f"{pod['metadata']['name']} {status.get('phase', '?')}{' ready' if ready else ''}"


def running(pod: dict[str, Any]) -> bool:
    """Whether a container of the pod runs (its logs can be followed, its port forwarded)."""
    return any("running" in c.get("state", {})
               for c in pod.get("status", {}).get("containerStatuses", []))


def node_index(pod: dict[str, Any]) -> int:
    """The pod's node in the layout: its LeaderWorkerSet worker index (0, the head, when it
    has none: a Deployment's pod)."""
    return int(pod["metadata"].get("labels", {}).get(WORKER_INDEX, "0") or 0)


# -- the run ------------------------------------------------------------------------------
FORWARD_WAIT_S = 15.0  # port-forward's "Forwarding from" line
POLL_S = 1.0  # pods' status is asked at most this often
FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> \d+")


class KubernetesRun(Deployment):
    """One applied deployment; see the module docstring."""

    queued = True

    def __init__(self, objects: Sequence[dict[str, Any]], secret: dict[str, Any] | None,
                 name: str, api_port: int, directory: Path, kubectl: Kubectl, *,
                 planned_url: str = "", stop_timeout_s: float = 15.0) -> None:
        self.planned_url, self.stop_timeout_s = planned_url, stop_timeout_s
        self.objects = list(objects)
        self.secret = secret
        self.name = name
        # the API Service (never named like an LWS: its controller's headless Service is)
        self.service = next(o["metadata"]["name"] for o in self.objects
                            if o["kind"] == "Service")
        self.api_port = api_port
        self.kubectl = kubectl
        self.manifest = directory / MANIFESTS_YAML
        self.log_path: Path = directory / SERVER_LOG
        self._applied = False
        self._pods: list[dict[str, Any]] = []
        self._asked = 0.0
        self._seen_pods = False
        self._followers: dict[str, tuple[subprocess.Popen[str], threading.Thread]] = {}
        self._forward: subprocess.Popen[str] | None = None
        self._url: str | None = None
        self._forward_error: str | None = None
        self._log_lock = threading.Lock()
        self._log: IO[str] | None = None

    # -- the engine -----------------------------------------------------------------------
    def start(self) -> None:
        self.kubectl.require()
        probe = self.kubectl.run("version", "-o", "json", timeout=CONNECT_TIMEOUT_S, check=False)
        if probe.returncode != 0:
            raise ServerError("no Kubernetes cluster answers kubectl (its current context): "
                              f"{(probe.stderr or probe.stdout).strip()}; nothing was applied")
        self.manifest.write_text(to_yaml(self.objects))
        secret = None if self.secret is None else str(self.secret["metadata"]["name"])
        record_deployment(self.manifest.parent, f"Kubernetes {self.describe_objects()}",
                          k8s_delete(self.kubectl.argv(), self.manifest, secret))
        self._log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 (closed in stop)
        if self.secret is not None:  # from stdin: its values are never on disk
            self.kubectl.run("apply", "-f", "-", stdin=json.dumps(self.secret))
        self._applied = True
        self.kubectl.run("apply", "-f", str(self.manifest))
        progress(f"applied {self.manifest} ({self.describe_objects()})")

    @property
    def _selector(self) -> str:
        return f"{INSTANCE_LABEL}={self.name}"

    def describe_objects(self) -> str:
        return ", ".join(f"{o['kind']} {o['metadata']['name']}" for o in self.objects)

    def pods(self) -> list[dict[str, Any]]:
        """The deployment's pods now (asked at most every POLL_S)."""
        if time.monotonic() - self._asked >= POLL_S:
            done = self.kubectl.run("get", "pods", "-l", self._selector,
                                    "-o", "json")
            self._pods = sorted(json.loads(done.stdout or "{}").get("items", []),
                                key=lambda p: p["metadata"]["name"])
            self._asked = time.monotonic()
            self._seen_pods |= bool(self._pods)
            self._followrunning()
        return self._pods

    def base_url(self) -> str | None:
        if self._url is None and any(running(p) for p in self.pods()):
            self._port_forward()
        return self._url

    def ended(self) -> str | None:
        pods = self.pods()
        for pod in pods:
            problem = pod_problem(pod)
            if problem:
                return problem
        if self._seen_pods and not pods:
            return f"the pods of {self.describe_objects()} are gone"
        if self._forward_error:
            return self._forward_error
        if self._forward is not None and self._forward.poll() is not None:
            err = self._forward.stderr.read().strip() if self._forward.stderr else ""
            return f"kubectl port-forward to service/{self.service} ended: {err or 'no reason'}"
        return None

    def describe(self) -> str:
        pods = self._pods
        shown = ", ".join(pod_line(p) for p in pods) if pods else "no pods yet"
        return f"Kubernetes {self.describe_objects()}: {shown}"

    def stop(self) -> Teardown:
        start, timeout_s = time.monotonic(), self.stop_timeout_s
        stop_stream(self._forward)
        gone = True
        if self._applied:
            wait = f"--timeout={max(1, int(timeout_s))}s"
            self.kubectl.run("delete", "-f", str(self.manifest), "--wait=true", wait,
                             "--ignore-not-found", timeout=timeout_s + REQUEST_TIMEOUT_S,
                             check=False)
            if self.secret is not None:
                self.kubectl.run("delete", "secret", self.secret["metadata"]["name"],
                                 "--ignore-not-found", check=False)
            gone = self._wait_gone(start + timeout_s + REQUEST_TIMEOUT_S)
        for proc, thread in self._followers.values():
            thread.join(5)
            stop_stream(proc)
        if self._log is not None:
            self._log.close()
        if not gone:
            kubectl = self.kubectl.argv()
            progress(f"{self.describe_objects()} still present after delete; check "
                     f"`{shlex.join([*kubectl, 'get', '-f', str(self.manifest)])}` and "
                     f"`{shlex.join([*kubectl, 'get', 'pods', '-l', self._selector])}`")
        return Teardown(time.monotonic() - start, "kubectl delete", (),
                        self._forward is None or self._forward.poll() is not None,
                        deployment=self.describe_objects(), deployment_gone=gone)

    def _wait_gone(self, deadline: float) -> bool:
        """Whether the objects and their pods are confirmed gone before `deadline`."""
        while True:
            left = self.kubectl.run("get", "-f", str(self.manifest), "-o", "json",
                                    "--ignore-not-found", check=False)
            objects = json.loads(left.stdout or "{}").get("items", []) if left.returncode == 0 \
                else None
            self._asked = 0.0
            pods = self.pods()
            if objects == [] and not pods:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)

    # -- the head's URL and the logs ---------------------------------------------------------
    def _port_forward(self) -> None:
        if self._forward is not None and self._forward.poll() is None:
            return
        proc = self.kubectl.stream("port-forward", f"service/{self.service}",
                                   f":{self.api_port}")
        found: list[str] = []
        ready = threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:  # keep draining: kubectl logs every connection
                m = FORWARDING.search(line)
                if m and not found:
                    found.append(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        ready.wait(FORWARD_WAIT_S)
        if found:
            self._forward = proc
            self._url = f"http://127.0.0.1:{found[0]}"
            progress(f"kubectl port-forward service/{self.service}: {self._url} -> "
                     f"{self.api_port}")
        else:  # the pod may not be running yet: asked again on the next poll
            stop_stream(proc)

    def _followrunning(self) -> None:
        for pod in self._pods:
            name = pod["metadata"]["name"]
            if name in self._followers or not running(pod):
                continue
            proc = self.kubectl.stream("logs", "--follow", name)
            thread = threading.Thread(target=self._copy, args=(proc, node_index(pod)),
                                      daemon=True)
            thread.start()
            self._followers[name] = (proc, thread)

    def _copy(self, proc: subprocess.Popen[str], index: int) -> None:
        prefix = f"[node {index}] " if index else ""
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._log_lock:
                if self._log is not None and not self._log.closed:
                    self._log.write(prefix + line)
                    self._log.flush()


def _secret_object(name: str, namespace: str | None, instance: str,
                   values: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {INSTANCE_LABEL: instance}}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque",
            "stringData": values}


def kubernetes_run(plan: LaunchPlan, spec: K8sSpec, directory: Path, *,
                   stop_timeout_s: float) -> KubernetesRun:
    """The deployment of `plan.layout` as Kubernetes objects, validated offline; nothing is
    applied until `start()`. The preflight has checked the image (the k8s target's findings:
    pinned by digest)."""
    values = secret_environment(plan.layout, plan.env, url_refs(plan.layout, plan.env))
    # The run's own Secret: a user's `deploy.k8s.secret_name` is never replaced or deleted.
    spec = replace(spec, secret_name=f"{spec.name}-run-secrets")
    objects = manifests(plan.layout, spec, plan.env)
    require_valid_manifests(objects)
    secret = (_secret_object(spec.secret_name, spec.namespace, spec.name, values)
              if values else None)
    directory.mkdir(parents=True, exist_ok=True)
    return KubernetesRun(objects, secret, spec.name, int(plan.layout.head.api_port or plan.port),
                         directory, Kubectl(spec.namespace), planned_url=plan.base_url,
                         stop_timeout_s=stop_timeout_s)
