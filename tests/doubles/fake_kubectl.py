"""A fake `kubectl` over a fake one-host cluster, for the tests: no Kubernetes API server or
kubelet can run on this machine (no container runtime), so this double plays both, with real
processes and real TCP. It is a real executable (`install` puts a `kubectl` wrapper on a PATH
directory); its state lives in `$FAKE_KUBECTL_STATE` between calls, as a cluster's would.

- `apply -f FILE|-`: stores the objects; a LeaderWorkerSet (or Deployment) starts its pods: each
  container's command runs on this host under a small supervisor (`_kubelet`), in its own
  process group, with the environment a kubelet gives it: the "image's" environment (this
  process's), the container's `env` (values, `secretKeyRef` from stored Secrets, `$(VAR)`
  expansion), `KUBERNETES_SERVICE_HOST`/`PORT` and LWS's variables
  (`LWS_LEADER_ADDRESS=127.0.0.1`, `LWS_WORKER_INDEX`, `LWS_GROUP_SIZE`). Pod names follow LWS
  (`NAME-0`, `NAME-0-1`). A memory-backed `emptyDir` is the pod's own: the container runs in a
  mount namespace of its own with a fresh tmpfs at the volume's mountPath (`unshare`; where
  this host cannot, the pod gets no KUBERNETES_SERVICE_HOST, so nothing treats the host's
  directory as the pod's).
- The LWS controller's rule (`pkg/controllers/leaderworkerset_controller.go`): a LeaderWorkerSet
  gets a headless Service named after itself, which `LWS_LEADER_ADDRESS`
  (`NAME-GROUP.NAME.NAMESPACE`) resolves through, only if no Service of that name exists. A
  Service of the user's named like the LWS, applied before it or patched into the headless one
  after, leaves the leader's name unresolvable: the group's pods crash-loop
  (CrashLoopBackOff, the reason in the message). The headless Service goes with its LWS.
- `get pods -l SEL -o json`: pods with phases from the processes: Running while the container
  runs (Ready when its readiness probe's `/health` answers 200); a container that exited is
  CrashLoopBackOff (last state: terminated, its exit code), as with restartPolicy Always; an
  image listed in `$FAKE_KUBECTL_MISSING_IMAGES` never starts (ImagePullBackOff).
- `get -f FILE -o json [--ignore-not-found]`, `version -o json`.
- `logs -f POD`: the container's output, followed until it ends.
- `port-forward service/NAME :PORT`: a local port forwarded over TCP to the Service's pod's
  port, announced with kubectl's own line `Forwarding from 127.0.0.1:N -> PORT`.
- `delete -f FILE|secret NAME [--wait]`: SIGTERM to each pod's process group, SIGKILL after
  the pod's grace period, and waits until no process of it is left.

`$FAKE_KUBECTL_UNREACHABLE=1` makes every call that needs the API server fail as kubectl does
when no cluster answers. `container_env` and `expand` are the kubelet's rules, importable.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

_REF = re.compile(r"\$(\$|\(([A-Za-z_][A-Za-z0-9_.-]*)\))")
UNREACHABLE = ("The connection to the server 127.0.0.1:6443 was refused - did you specify the "
               "right host or port?")
GRACE_S = 10.0  # terminationGracePeriodSeconds's stand-in
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
RESOURCE = {"LeaderWorkerSet": "leaderworkerset.leaderworkerset.x-k8s.io",
            "Deployment": "deployment.apps", "Service": "service", "Secret": "secret"}
OWNER = "fake-kubectl/owned-by"  # annotation on the controller's headless Service


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: `$$` is `$`, an unknown `$(VAR)` stays as written."""
    def one(m: re.Match[str]) -> str:
        if m.group(1) == "$":
            return "$"
        return env.get(m.group(2), m.group(0))

    return _REF.sub(one, text)


def container_env(container: Mapping[str, Any],
                  secrets: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """A container's environment from its spec; KeyError names a Secret or key that is missing
    (the kubelet's CreateContainerConfigError)."""
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        if "valueFrom" in entry:
            ref = entry["valueFrom"]["secretKeyRef"]
            env[entry["name"]] = secrets[ref["name"]][ref["key"]]
        else:
            env[entry["name"]] = expand(str(entry.get("value", "")), env)
    return env


def install(bin_dir: Path, state: Path) -> Path:
    """A `kubectl` in `bin_dir` that runs this fake with its state in `state`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "kubectl"
    path.write_text(f'#!/bin/sh\nFAKE_KUBECTL_STATE="{state}" exec {sys.executable} '
                    f'{Path(__file__).resolve()} "$@"\n')
    path.chmod(0o755)
    return path


class Live(NamedTuple):
    """One process of a fake cluster, read while it was alive (a process can exit, or become a
    zombie, between being listed and being asked for its command line)."""

    pid: int
    cmdline: str
    pod: str | None


def processes(state: Path) -> list[Live]:
    """Every live process of this fake cluster: its pods' (and their children's: each carries
    `FAKE_KUBECTL_POD` in its environment) and any `kubectl` of it (port-forward, logs)."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            env = p.environ()
            if (env.get("FAKE_KUBECTL_STATE") == str(state)
                    or env.get("FAKE_KUBECTL_POD", "").startswith(f"{state}/")):
                found.append(Live(p.pid, " ".join(p.cmdline()), env.get("FAKE_KUBECTL_POD")))
        except psutil.Error:  # it ended (or became a zombie) while being read: not left
            continue
    return found


def reap(state: Path) -> None:
    """SIGKILL whatever this fake cluster still runs (a test's cleanup when it failed)."""
    import psutil

    for live in processes(state):
        with contextlib.suppress(psutil.Error):
            psutil.Process(live.pid).kill()


# --- the cluster's state -----------------------------------------------------------------

class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "pods").mkdir(parents=True, exist_ok=True)

    def _read(self, name: str, default: Any) -> Any:
        path = self.root / name
        return json.loads(path.read_text()) if path.exists() else default

    def _write(self, name: str, data: Any) -> None:
        tmp = self.root / f".{name}.tmp"
        tmp.write_text(json.dumps(data))
        tmp.replace(self.root / name)

    @property
    def objects(self) -> list[dict[str, Any]]:
        return self._read("objects.json", [])

    def save_objects(self, objects: list[dict[str, Any]]) -> None:
        self._write("objects.json", objects)

    def find(self, kind: str, name: str) -> dict[str, Any] | None:
        return next((o for o in self.objects
                     if o["kind"] == kind and o["metadata"]["name"] == name), None)

    def secrets(self) -> dict[str, dict[str, str]]:
        """Secret name -> key -> value (stored base64-encoded, as the API server does)."""
        return {o["metadata"]["name"]: {k: base64.b64decode(v).decode()
                                        for k, v in o.get("data", {}).items()}
                for o in self.objects if o["kind"] == "Secret"}

    def pods(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted((self.root / "pods").glob("*.json"))]

    def pod(self, name: str) -> dict[str, Any] | None:
        path = self.root / "pods" / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def save_pod(self, pod: dict[str, Any]) -> None:
        path = self.root / "pods" / f"{pod['name']}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(pod))
        tmp.replace(path)

    def exit_code(self, name: str) -> int | None:
        path = self.root / "pods" / f"{name}.exit"
        return int(path.read_text()) if path.exists() and path.read_text().strip() else None

    def log(self, name: str) -> Path:
        return self.root / "pods" / f"{name}.log"


def _group_alive(pgid: int) -> bool:
    import psutil

    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.info["pid"]) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return False


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


# --- pods ------------------------------------------------------------------------------------

PodPlan = tuple[str, dict[str, Any], dict[str, str], dict[str, str]]


def _pods_of(obj: dict[str, Any]) -> list[PodPlan]:
    """(pod name, pod template, extra labels, extra env) for each pod the object makes."""
    name = obj["metadata"]["name"]
    if obj["kind"] == "LeaderWorkerSet":
        spec = obj["spec"]
        template = spec["leaderWorkerTemplate"]
        size = int(template["size"])
        out = []
        for group in range(int(spec.get("replicas", 1))):
            for index in range(size):
                key = "leaderTemplate" if index == 0 else "workerTemplate"
                pod = f"{name}-{group}" + (f"-{index}" if index else "")
                labels = {LWS_NAME: name, LWS_INDEX: str(index),
                          "leaderworkerset.sigs.k8s.io/group-index": str(group)}
                env = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": str(size),
                       "LWS_WORKER_INDEX": str(index), "LWS_NAME": name}
                out.append((pod, template[key], labels, env))
        return out
    if obj["kind"] == "Deployment":
        return [(f"{name}-fake-{i}", obj["spec"]["template"], {}, {})
                for i in range(int(obj["spec"].get("replicas", 1)))]
    return []


def _unresolvable(name: str, namespace: str, pod: str) -> list[str]:
    group = pod[len(name) + 1:].split("-")[0]
    return ["CrashLoopBackOff",
            f"back-off restarting failed container: the leader's address {name}-{group}.{name}."
            f"{namespace} does not resolve: Service {name} is not the LeaderWorkerSet's "
            "headless Service (a Service named like the LWS took its place)"]


def _memory_mounts(template: dict[str, Any]) -> list[str]:
    """The container's mountPaths of memory-backed emptyDir volumes."""
    memory = {v["name"] for v in template["spec"].get("volumes", [])
              if (v.get("emptyDir") or {}).get("medium") == "Memory"}
    container = template["spec"]["containers"][0]
    return [m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] in memory]


@functools.cache
def _own_mounts() -> bool:
    """Whether this host lets a pod have mounts of its own (root, mount namespaces)."""
    try:
        return subprocess.run(["unshare", "--mount", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _start_pod(cluster: Cluster, owner: dict[str, Any], pod: str, template: dict[str, Any],
               labels: dict[str, str], lws_env: dict[str, str],
               broken: list[str] | None = None) -> None:
    container = template["spec"]["containers"][0]
    record = {"name": pod, "owner": [owner["kind"], owner["metadata"]["name"]],
              "labels": {**template.get("metadata", {}).get("labels", {}), **labels},
              "image": container.get("image", ""), "pgid": None, "started": time.time(),
              "port": None, "waiting": broken}
    if broken:
        cluster.save_pod(record)
        return
    probe = container.get("readinessProbe")
    if probe:
        port = probe["httpGet"]["port"]
        record["port"] = next((p["containerPort"] for p in container.get("ports", [])
                               if p.get("name") == port), port)
    missing = [i for i in os.environ.get("FAKE_KUBECTL_MISSING_IMAGES", "").split(",") if i]
    if record["image"] in missing:
        record["waiting"] = ["ImagePullBackOff",
                             f'Back-off pulling image "{record["image"]}"']
        cluster.save_pod(record)
        return
    try:
        env = {**os.environ, **container_env(container, cluster.secrets()), **lws_env}
    except KeyError as e:
        record["waiting"] = ["CreateContainerConfigError", f"secret or key {e} not found"]
        cluster.save_pod(record)
        return
    env.pop("FAKE_KUBECTL_STATE", None)
    env["FAKE_KUBECTL_POD"] = f"{cluster.root}/{pod}"  # how `processes` finds its children
    command = [expand(c, env) for c in [*container.get("command", []),
                                        *container.get("args", [])]]
    mounts = _memory_mounts(template)
    if not mounts or _own_mounts():
        env |= {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    if mounts and _own_mounts():  # the pod's emptyDir: a tmpfs only its container sees
        mount = " && ".join(f'mount -t tmpfs tmpfs "${i}"' for i in range(1, len(mounts) + 1))
        command = ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                   f'{mount} && shift {len(mounts)} && exec "$@"', "pod", *mounts, *command]
    # Not *.json: `pods()` reads every *.json as a pod record (a spec read there raced the
    # kubelet that deletes it, and a `get pods` failed with KeyError 'labels').
    spec_path = cluster.root / "pods" / f"{pod}.container"
    spec_path.write_text(json.dumps({"command": command, "env": env}))
    with open(cluster.log(pod), "ab") as log:
        kubelet = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "_kubelet",
                                    str(cluster.root), pod], stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    record["pgid"] = kubelet.pid
    cluster.save_pod(record)


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _kubelet(root: str, pod: str) -> int:
    """Run one pod's container, then record its exit code (the pod's supervisor)."""
    cluster = Cluster(Path(root))
    spec = json.loads((cluster.root / "pods" / f"{pod}.container").read_text())
    (cluster.root / "pods" / f"{pod}.container").unlink()  # the env held the Secret's values
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM is the container's
    # ... with its default action: an ignored signal stays ignored across exec, and a container
    # that never sees SIGTERM waits out the whole grace before its SIGKILL.
    child = subprocess.Popen(spec["command"], env=spec["env"], stdin=subprocess.DEVNULL,
                             preexec_fn=_default_sigterm)
    while True:
        try:
            code = child.wait()
            break
        except KeyboardInterrupt:
            continue
    (cluster.root / "pods" / f"{pod}.exit").write_text(str(code))
    return 0


def _stop_pods(cluster: Cluster, owner: tuple[str, str], wait: bool) -> None:
    pods = [p for p in cluster.pods() if tuple(p["owner"]) == owner]
    for pod in pods:
        if pod["pgid"]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pod["pgid"], signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for pod in pods:
        while wait and pod["pgid"] and _group_alive(pod["pgid"]):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pod["pgid"], signal.SIGKILL)
            time.sleep(0.2)
        for suffix in (".json", ".exit", ".log", ".container"):
            (cluster.root / "pods" / f"{pod['name']}{suffix}").unlink(missing_ok=True)


def pod_status(cluster: Cluster, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as `kubectl get pods -o json` shows it."""
    status: dict[str, Any] = {"phase": "Pending"}
    container: dict[str, Any] = {"name": "vllm", "image": pod["image"], "ready": False,
                                "restartCount": 0}
    code = cluster.exit_code(pod["name"])
    if pod["waiting"]:
        container["state"] = {"waiting": {"reason": pod["waiting"][0],
                                          "message": pod["waiting"][1]}}
    elif code is not None:
        status["phase"] = "Running"  # restartPolicy Always: the kubelet keeps restarting it
        container["restartCount"] = 1
        container["state"] = {"waiting": {"reason": "CrashLoopBackOff",
                                          "message": "back-off 10s restarting failed container"}}
        container["lastState"] = {"terminated": {
            "exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
    elif pod["pgid"] and _group_alive(pod["pgid"]):
        status["phase"] = "Running"
        container["state"] = {"running": {"startedAt": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(pod["started"]))}}
        container["ready"] = pod["port"] is None or _healthy(pod["port"])
    else:
        status["phase"] = "Unknown"
        container["state"] = {"waiting": {"reason": "ContainerStatusUnknown"}}
    status["containerStatuses"] = [container]
    status["conditions"] = [{"type": "Ready", "status": str(container["ready"])}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod["name"], "labels": pod["labels"]}, "status": status}


# --- commands ------------------------------------------------------------------------------

def _selector(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(",") if part)


def _load(path: str) -> list[dict[str, Any]]:
    import yaml

    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def _show(obj: dict[str, Any]) -> str:
    return f"{RESOURCE.get(obj['kind'], obj['kind'].lower())}/{obj['metadata']['name']}"


def _headless(lws: dict[str, Any]) -> dict[str, Any]:
    """The LWS controller's headless Service for `lws`."""
    name = lws["metadata"]["name"]
    meta = {"name": name, "annotations": {OWNER: name}}
    if lws["metadata"].get("namespace"):
        meta["namespace"] = lws["metadata"]["namespace"]
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {LWS_NAME: name}}}


def _break_group(cluster: Cluster, lws: dict[str, Any]) -> None:
    """The headless Service of `lws` was patched by a Service of the user's: its pods' leader
    address no longer resolves, and they crash-loop."""
    name, namespace = lws["metadata"]["name"], lws["metadata"].get("namespace", "default")
    _stop_pods(cluster, ("LeaderWorkerSet", name), wait=True)
    for pod, template, labels, env in _pods_of(lws):
        _start_pod(cluster, lws, pod, template, labels, env,
                   _unresolvable(name, namespace, pod))


def apply(cluster: Cluster, path: str) -> int:
    objects = cluster.objects
    for obj in _load(path):
        if obj["kind"] == "Secret":  # stored as the API server stores it: data, base64
            data = {k: base64.b64encode(str(v).encode()).decode()
                    for k, v in obj.pop("stringData", {}).items()}
            obj["data"] = {**obj.get("data", {}), **data}
        name = obj["metadata"]["name"]
        found = cluster.find(obj["kind"], name)
        if found is not None and obj["kind"] == "Service" \
                and OWNER in found["metadata"].get("annotations", {}):
            lws = cluster.find("LeaderWorkerSet", found["metadata"]["annotations"][OWNER])
            found["metadata"]["annotations"].pop(OWNER)  # patched: no longer the controller's
            found["spec"].update(obj.get("spec", {}))
            objects = [found if (o["kind"], o["metadata"]["name"]) == ("Service", name) else o
                       for o in objects]
            cluster.save_objects(objects)
            if lws is not None:
                _break_group(cluster, lws)
            print(f"{_show(obj)} configured")
            continue
        if found is not None:
            print(f"{_show(obj)} unchanged")
            continue
        broken = None
        if obj["kind"] == "LeaderWorkerSet":
            if cluster.find("Service", name) is None:
                objects.append(_headless(obj))
            else:
                broken = name
        objects.append(obj)
        cluster.save_objects(objects)
        namespace = obj["metadata"].get("namespace", "default")
        for pod, template, labels, env in _pods_of(obj):
            _start_pod(cluster, obj, pod, template, labels, env,
                       broken and _unresolvable(broken, namespace, pod))
        print(f"{_show(obj)} created")
    return 0


def delete(cluster: Cluster, targets: list[tuple[str, str]], wait: bool,
           ignore_not_found: bool) -> int:
    code = 0
    for kind, name in targets:
        obj = cluster.find(kind, name)
        if obj is None:
            if not ignore_not_found:
                print(f'Error from server (NotFound): {RESOURCE.get(kind, kind)} "{name}" '
                      "not found", file=sys.stderr)
                code = 1
            continue
        _stop_pods(cluster, (kind, name), wait)
        cluster.save_objects([o for o in cluster.objects
                              if (o["kind"], o["metadata"]["name"]) != (kind, name)
                              and not (kind == "LeaderWorkerSet" and o["metadata"].get(
                                  "annotations", {}).get(OWNER) == name)])
        print(f'{_show(obj)} deleted')
    return code


def get(cluster: Cluster, args: list[str], opts: dict[str, str]) -> int:
    if "-f" in opts:
        found = [o for o in (cluster.find(d["kind"], d["metadata"]["name"])
                             for d in _load(opts["-f"])) if o]
        if not found and "--ignore-not-found" not in opts:
            print("Error from server (NotFound): not found", file=sys.stderr)
            return 1
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": found}))
        return 0
    if args[:1] == ["pods"]:
        wanted = _selector(opts.get("-l", ""))
        items = [pod_status(cluster, p) for p in cluster.pods()
                 if all(p["labels"].get(k) == v for k, v in wanted.items())]
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        return 0
    print(f"error: the fake kubectl cannot get {args}", file=sys.stderr)
    return 1


def logs(cluster: Cluster, name: str, follow: bool) -> int:
    pod = cluster.pod(name)
    if pod is None:
        print(f'Error from server (NotFound): pods "{name}" not found', file=sys.stderr)
        return 1
    if pod["pgid"] is None:
        print(f'Error from server (BadRequest): container "vllm" in pod "{name}" is waiting '
              "to start", file=sys.stderr)
        return 1
    path = cluster.log(name)
    out = sys.stdout.buffer
    with open(path, "rb") as f:
        while True:
            chunk = f.read(65536)
            if chunk:
                out.write(chunk)
                out.flush()
                continue
            if not follow or not path.exists() or cluster.exit_code(name) is not None \
                    or not _group_alive(pod["pgid"]):
                out.write(f.read())
                out.flush()
                return 0
            time.sleep(0.1)


def _pipe(a: socket.socket, b: socket.socket) -> None:
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def port_forward(cluster: Cluster, target: str, ports: str) -> int:
    kind, _, name = target.partition("/")
    service = cluster.find("Service", name) if kind in ("service", "svc") else None
    if service is None:
        print(f'Error from server (NotFound): services "{name}" not found', file=sys.stderr)
        return 1
    local, _, remote = ports.partition(":")
    selector = service["spec"]["selector"]
    pods = [p for p in cluster.pods() if all(p["labels"].get(k) == v
                                             for k, v in selector.items())]
    running = [p for p in pods if pod_status(cluster, p)["status"]["phase"] == "Running"
               and p["pgid"] and cluster.exit_code(p["name"]) is None]
    if not running:
        phase = pod_status(cluster, pods[0])["status"]["phase"] if pods else "Pending"
        print("error: unable to forward port because pod is not running. Current status="
              f"{phase}", file=sys.stderr)
        return 1
    pod = running[0]
    service_port = next(p for p in service["spec"]["ports"] if str(p["port"]) == remote)
    target_port = pod["port"] if service_port.get("targetPort") == "http" else int(
        service_port.get("targetPort", remote))
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(local or 0)))
    listener.listen(64)
    print(f"Forwarding from 127.0.0.1:{listener.getsockname()[1]} -> {remote}", flush=True)

    def watch() -> None:  # kubectl's port-forward ends when its pod goes away
        while cluster.pod(pod["name"]) and cluster.exit_code(pod["name"]) is None:
            time.sleep(0.5)
        print("E lost connection to pod", file=sys.stderr, flush=True)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
    while True:
        client, _ = listener.accept()
        print(f"Handling connection for {listener.getsockname()[1]}", flush=True)
        try:
            upstream = socket.create_connection(("127.0.0.1", target_port), timeout=5)
        except OSError:
            client.close()
            continue
        upstream.settimeout(None)
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()


_VALUED = {"-f", "-l", "-o", "-n", "--namespace", "--request-timeout", "--timeout", "--context",
           "-c", "--container"}


def parse(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    args, opts = [], {}
    it = iter(argv)
    for a in it:
        if "=" in a and a.startswith("--"):
            k, v = a.split("=", 1)
            opts[k] = v
        elif a in _VALUED:
            opts[a] = next(it, "")
        elif a.startswith("-"):
            opts[a] = "true"
        else:
            args.append(a)
    return args, opts


def main(argv: list[str]) -> int:
    if argv[:1] == ["_kubelet"]:
        return _kubelet(argv[1], argv[2])
    if argv[:1] == ["logs"]:  # there -f is --follow, not a file
        argv = ["logs", *("--follow" if a == "-f" else a for a in argv[1:])]
    args, opts = parse(argv)
    if not args:
        print("kubectl controls the Kubernetes cluster manager.", file=sys.stderr)
        return 1
    if os.environ.get("FAKE_KUBECTL_UNREACHABLE"):
        print(UNREACHABLE, file=sys.stderr)
        return 1
    cluster = Cluster(Path(os.environ["FAKE_KUBECTL_STATE"]))
    verb, rest = args[0], args[1:]
    if verb == "version":
        print(json.dumps({"clientVersion": {"gitVersion": "v1.31.0-fake"},
                          "serverVersion": {"gitVersion": "v1.31.0-fake"}}))
        return 0
    if verb == "apply":
        return apply(cluster, opts["-f"])
    if verb == "get":
        return get(cluster, rest, opts)
    if verb == "delete":
        targets = ([(d["kind"], d["metadata"]["name"]) for d in _load(opts["-f"])]
                   if "-f" in opts else [(rest[0].capitalize(), rest[1])])
        return delete(cluster, targets, opts.get("--wait", "true") != "false",
                      "--ignore-not-found" in opts)
    if verb == "logs":
        return logs(cluster, rest[0], "--follow" in opts)
    if verb == "port-forward":
        return port_forward(cluster, rest[0], rest[1])
    print(f'error: unknown command "{verb}" for the fake kubectl', file=sys.stderr)
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
