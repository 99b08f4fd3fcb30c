"""A node layout as Kubernetes objects: a LeaderWorkerSet for more than one node, a Deployment
for one node per replica, and a Service in front of the API server(s). Pure: dicts in the API's
own field names, validated by `validation.py` and rendered as YAML here (`to_yaml`).

`deploy.k8s` comes in as the manifests need it (`K8sSpec`), and every value of it the API server
would refuse is refused first with the key to change (`check_spec`): nothing is printed or
applied from settings a cluster would reject late or run wrong.

The pods run the layout's rank dispatch in bash: LWS injects `LWS_LEADER_ADDRESS`,
`LWS_WORKER_INDEX` and `LWS_GROUP_SIZE` into every container, so the rank and the head address
come from the engine at run time and the group size is checked against the layout.

No secret is written: a secret-named variable and every URL password
(`DSPARK_URL_PASSWORD_N`, referred to as `${VAR}` in the script and `$(VAR)` in env values)
come from the Secret `secret_name` through `secretKeyRef`; `create_secret_line` says how to
make it. Kubernetes expands `$(VAR)` in commands and env values, so a literal `$(` or `$$` is
escaped (`$$(`, `$$$`) to reach the container unchanged.

The YAML is what people apply: one document per object, `---` between them, fields in the
order they were built, scripts as literal blocks, no YAML anchors.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dspark_cli.deploy.cluster import (
    HEAD_VAR,
    command_text,
    dispatch,
    refuse_loopback_head,
    secret_environment,
    url_refs,
)
from dspark_cli.deploy.k8s import validation
from dspark_cli.errors import UsageError
from dspark_cli.launch.layout import NodeLayout
from dspark_cli.launch.render import is_secret
from dspark_cli.launch.secrets import ShellRefs, redact_urls

DIGEST = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
NAME_MAX = 50  # pods are NAME-GROUP-INDEX, the API Service NAME-leader: both within 63
# Where an unpinned image would go in a dry run's manifests (never a made-up digest).
IMAGE_UNSET = "<set deploy.k8s.image=REPO@sha256:DIGEST>"
COUNTS = ("replicas", "probe_period_s", "startup_failure_threshold",
          "readiness_failure_threshold", "liveness_period_s", "liveness_failure_threshold",
          "probe_timeout_s")


@dataclass(frozen=True)
class K8sSpec:
    """`deploy.k8s` plus the plan's facts the pods need."""

    name: str
    image: str | None  # REPO@sha256:<digest>; anything else fails `image_problem`
    platform: str  # rocm | cuda | cpu: which GPU resource, if any
    model_path: str
    model_pvc: str | None = None
    model_host_path: str | None = None
    namespace: str | None = None
    replicas: int = 1
    shm_size: str = "64Gi"
    secret_name: str = "dspark-secrets"
    probe_period_s: int = 10
    startup_failure_threshold: int = 360
    readiness_failure_threshold: int = 3
    liveness_period_s: int = 30
    liveness_failure_threshold: int = 5
    probe_timeout_s: int = 10
    node_selector: Mapping[str, str] | None = None
    cpu: str | None = None  # the pod's CPU request (a quantity); None: none
    memory: str | None = None  # the pod's memory request (a quantity); None: none
    nccl_socket_ifname: str | None = None  # NCCL_SOCKET_IFNAME in every pod, when set
    gloo_socket_ifname: str | None = None  # GLOO_SOCKET_IFNAME in every pod, when set


def image_problem(image: str | None) -> str | None:
    """Why `deploy.k8s.image` cannot be applied as is, or None when it is pinned by digest.
    A dry run prints the manifests anyway and reports this as a failed check."""
    if not image:
        return ("deploy=k8s needs the image pinned by digest, and deploy.k8s.image is not set; "
                "a locally built image (as the validation report's) has no registry digest "
                "until it is pushed: push it to a registry the cluster pulls from and set "
                "deploy.k8s.image=REGISTRY/REPO@sha256:<64 hex digits> (`docker inspect "
                "--format '{{index .RepoDigests 0}}' IMAGE` shows it after the push)")
    if not DIGEST.match(image):
        return (f"deploy.k8s.image={image!r} is not pinned by digest; a tag can move under a "
                "running deployment. Give REPO@sha256:<64 hex digits> (`docker inspect "
                "--format '{{index .RepoDigests 0}}' IMAGE` shows it)")
    return None


def local_model(spec: K8sSpec) -> bool:
    """Whether the model is a path to mount (else a hub name or URL vLLM fetches itself)."""
    return spec.model_path.startswith("/")


def _refuse(key: str, value: object, problem: str | None) -> None:
    if problem:
        raise UsageError(f"deploy.k8s.{key}={value!r} {problem}; the API server would refuse "
                         "it")


def _values(spec: K8sSpec) -> list[tuple[str, object, Callable[[str], str | None]]]:
    """(key, value, check) of every set string the objects carry as a name or quantity."""
    checks: list[tuple[str, object, Callable[[str], str | None]]] = [
        ("namespace", spec.namespace, validation.dns1123_label),
        ("secret_name", spec.secret_name, validation.dns1123_subdomain),
        ("model_pvc", spec.model_pvc, validation.dns1123_subdomain),
        ("model_host_path", spec.model_host_path, validation.host_path),
        ("shm_size", spec.shm_size, validation.quantity),
        ("cpu", spec.cpu, validation.quantity),
        ("memory", spec.memory, validation.quantity),
    ]
    for key, value in (spec.node_selector or {}).items():
        checks += [(f"node_selector key {key!r}", key, validation.label_key),
                   (f"node_selector.{key}", value, validation.label_value)]
    return [(k, v, c) for k, v, c in checks if v is not None]


def check_spec(spec: K8sSpec, nodes: int, max_groups: int) -> None:
    """Refuse what a cluster would refuse late or run wrong: names that are no DNS names,
    quantities that do not parse, a relative host path, two model volumes, counts outside
    int32 (or, for a LeaderWorkerSet of `nodes` > 1, past the CRD's `max_groups`). (The image
    is `image_problem`'s: a check a dry run reports, not a reason to print nothing.)"""
    problem = validation.dns1035_label(spec.name)
    if problem or len(spec.name) > NAME_MAX:
        raise UsageError(f"deploy.k8s.name={spec.name!r} must be a DNS label of at most "
                         f"{NAME_MAX} characters (lower-case letters, digits, '-', starting "
                         "with a letter), e.g. dspark-v4: it names the pods and Services")
    for key, value, check in _values(spec):
        _refuse(key, value, check(str(value)))
    if spec.model_pvc and spec.model_host_path:
        raise UsageError("set one model volume: deploy.k8s.model_pvc or "
                         "deploy.k8s.model_host_path, not both")
    if (spec.model_pvc or spec.model_host_path) and not local_model(spec):
        raise UsageError("a model volume (deploy.k8s.model_pvc or model_host_path) is mounted "
                         "at model.path, which must then be an absolute path, not "
                         f"{redact_urls(spec.model_path)!r}")
    for key in COUNTS:
        value = getattr(spec, key)
        if not 1 <= value <= validation.INT32_MAX:
            raise UsageError(f"deploy.k8s.{key} must be 1 to {validation.INT32_MAX} (an int32), "
                             f"not {value}")
    if nodes > 1 and spec.replicas > max_groups:
        raise UsageError(f"deploy.k8s.replicas={spec.replicas}: a LeaderWorkerSet takes at most "
                         f"{max_groups} groups (its CRD's maximum)")
    for key in ("nccl_socket_ifname", "gloo_socket_ifname"):
        value = getattr(spec, key)
        if value is not None and (not value.strip() or not value.isprintable()):
            raise UsageError(f"deploy.k8s.{key}={value!r} is no interface name (e.g. eth0, "
                             "or ^lo,docker to exclude)")


# -- the objects ---------------------------------------------------------------------------
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"  # every object and pod of one deployment
RANK_VAR = "LWS_WORKER_INDEX"
GPU_RESOURCE = {"rocm": "amd.com/gpu", "cuda": "nvidia.com/gpu"}
SHM_PATH = "/dev/shm"
# A restarted container keeps its pod's /dev/shm (llm-d#352): what the last run left goes
# first. Only inside a pod (the kubelet always sets KUBERNETES_SERVICE_HOST), where /dev/shm
# is the pod's own emptyDir; the same text run on a host leaves the host's alone.
CLEAN_SHM = (f'if [ -n "${{KUBERNETES_SERVICE_HOST:-}}" ]; then find {SHM_PATH} -mindepth 1 '
             "-delete 2>/dev/null || true; fi")


def _labels(spec: K8sSpec) -> dict[str, str]:
    return {"app.kubernetes.io/name": "dspark", INSTANCE_LABEL: spec.name}


def _metadata(spec: K8sSpec, name: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name or spec.name, "labels": _labels(spec)}
    if spec.namespace:
        meta["namespace"] = spec.namespace
    return meta


def k8s_literal(text: str) -> str:
    """`text` escaped against Kubernetes' `$(VAR)` expansion (commands, args, env values)."""
    return re.sub(r"\$(?=[$(])", "$$", text)


def _secret_ref(name: str, spec: K8sSpec) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": spec.secret_name, "key": name}}}


def _env(env: Sequence[tuple[str, str]], spec: K8sSpec, refs: ShellRefs) -> list[dict[str, Any]]:
    """The plan's environment as container env: the URL passwords' variables first (from the
    Secret), then each variable; a secret-named one refers to the Secret, a URL password inside
    a value to its variable (`$(VAR)`, which Kubernetes expands from the entries before it).
    The cross-node interface settings, when set, take the place of the same variables."""
    settings = {k: v for k, v in (("NCCL_SOCKET_IFNAME", spec.nccl_socket_ifname),
                                  ("GLOO_SOCKET_IFNAME", spec.gloo_socket_ifname)) if v}
    env = [*((k, v) for k, v in env if k not in settings), *settings.items()]
    out = [_secret_ref(var, spec) for var in refs.variables()]
    for name, value in env:
        problem = validation.env_name(name)
        if problem:
            raise UsageError(f"the environment variable {name!r} (hw.env, model.env or the "
                             f"plan's) {problem}; the API server would refuse the pods")
        if is_secret(name):
            out.append(_secret_ref(name, spec))
        else:
            out.append({"name": name, "value": "".join(
                f"$({v})" if v else k8s_literal(t) for t, v in refs.split(value))})
    return out


def secret_keys(layout: NodeLayout, env: Sequence[tuple[str, str]]) -> list[str]:
    """The keys the Secret `deploy.k8s.secret_name` must hold for these manifests."""
    return list(secret_environment(layout, env, url_refs(layout, env)))


def create_secret_line(spec: K8sSpec, keys: Sequence[str]) -> str | None:
    """The `kubectl create secret` line that makes the Secret from the shell's variables of
    the same names (their values are never in the manifests), or None when none is needed."""
    if not keys:
        return None
    words = ["kubectl", "create", "secret", "generic", spec.secret_name,
             *(["--namespace", spec.namespace] if spec.namespace else [])]
    literals = " ".join(f'--from-literal={shlex.quote(k)}="${{{k}:?set {k}}}"' for k in keys)
    return f"{shlex.join(words)} {literals}"


def apply_line(manifest: Path) -> str:
    """The `kubectl apply` line for the written manifests, quoted for the shell."""
    return shlex.join(["kubectl", "apply", "-f", str(manifest)])


def _probe(period: int, threshold: int, timeout: int) -> dict[str, Any]:
    return {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": period,
            "failureThreshold": threshold, "timeoutSeconds": timeout}


def _volumes(spec: K8sSpec) -> list[dict[str, Any]]:
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}}
    if spec.model_pvc:
        model: dict[str, Any] = {"name": "model", "persistentVolumeClaim": {
            "claimName": spec.model_pvc, "readOnly": True}}
    elif local_model(spec) or spec.model_host_path:
        model = {"name": "model", "hostPath": {
            "path": spec.model_host_path or spec.model_path, "type": "Directory"}}
    else:
        return [shm]
    return [shm, model]


def _mounts(spec: K8sSpec) -> list[dict[str, Any]]:
    shm = {"name": "dshm", "mountPath": SHM_PATH}
    if len(_volumes(spec)) == 1:
        return [shm]
    return [shm, {"name": "model", "mountPath": spec.model_path, "readOnly": True}]


def container_script(layout: NodeLayout, group_env: bool,
                     common_env: Mapping[str, str] | None = None,
                     refs: ShellRefs | None = None) -> str:
    """What every pod's container runs: one node's command (a Deployment), or the head address
    and rank from LWS, then the rank dispatch. URL passwords are demanded from the container's
    environment (the Secret) before anything runs."""
    refs = refs or url_refs(layout, common_env or {})
    demand = [*refs.exports()]
    if not group_env:
        return "\n".join([CLEAN_SHM, *demand,
                          "exec " + command_text(layout.head.argv, "", refs)]) + "\n"
    size = layout.nodes
    return "\n".join([
        "set -euo pipefail",
        CLEAN_SHM,
        *demand,
        f'if [ "${{LWS_GROUP_SIZE:-}}" != "{size}" ]; then',
        f'  echo "dspark: LWS_GROUP_SIZE=${{LWS_GROUP_SIZE:-unset}}, the layout has {size} '
        'nodes" >&2',
        "  exit 64",
        "fi",
        f'export {HEAD_VAR}="$LWS_LEADER_ADDRESS"',
        "",
        dispatch(layout, f"${RANK_VAR}", common_env=common_env, refs=refs),
    ])


def _resources(layout: NodeLayout, spec: K8sSpec) -> dict[str, Any]:
    """The node's GPUs (limits = requests, as device plugins need), and CPU and memory
    requests beside them: a pod with none is BestEffort, the first a node evicts."""
    requests = {k: v for k, v in (("cpu", spec.cpu), ("memory", spec.memory)) if v}
    limits: dict[str, str] = {}
    resource = GPU_RESOURCE.get(spec.platform)
    if resource and layout.gpus_per_node > 0:
        limits[resource] = requests[resource] = str(layout.gpus_per_node)
    return {k: v for k, v in (("limits", limits), ("requests", requests)) if v}


def pod_spec(layout: NodeLayout, spec: K8sSpec, env: Sequence[tuple[str, str]],
             api_port: int | None, group_env: bool) -> dict[str, Any]:
    """One pod: the vLLM container with GPUs, /dev/shm, the model, and probes on /health
    where it serves the API (a headless node has no HTTP to probe)."""
    refs = url_refs(layout, env)
    script = container_script(layout, group_env, dict(env), refs)
    container: dict[str, Any] = {
        "name": "vllm",
        "image": spec.image or IMAGE_UNSET,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/bash", "-c", k8s_literal(script)],
        "env": _env(env, spec, refs),
        "volumeMounts": _mounts(spec),
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
    }
    container["resources"] = _resources(layout, spec)
    if api_port is not None:
        container["ports"] = [{"name": "http", "containerPort": api_port, "protocol": "TCP"}]
        container["startupProbe"] = _probe(spec.probe_period_s, spec.startup_failure_threshold,
                                           spec.probe_timeout_s)
        container["readinessProbe"] = _probe(spec.probe_period_s,
                                             spec.readiness_failure_threshold,
                                             spec.probe_timeout_s)
        container["livenessProbe"] = _probe(spec.liveness_period_s,
                                            spec.liveness_failure_threshold, spec.probe_timeout_s)
    pod: dict[str, Any] = {"containers": [container], "volumes": _volumes(spec)}
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    return pod


def service_name(spec: K8sSpec, nodes: int) -> str:
    """The API Service's name. A LeaderWorkerSet's controller makes the headless Service that
    gives its pods their DNS names (`LWS_LEADER_ADDRESS`) under the LWS's own name, and only
    if no Service of that name exists: a Service named like it would take its place and the
    leader's name would never resolve. So it is NAME-leader there (upstream: vllm-leader)."""
    return spec.name if nodes == 1 else f"{spec.name}-leader"


def _service(spec: K8sSpec, name: str, selector: dict[str, str], port: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _metadata(spec, name),
            "spec": {"type": "ClusterIP", "selector": selector,
                     "ports": [{"name": "http", "port": port, "targetPort": "http",
                                "protocol": "TCP"}]}}


def manifests(layout: NodeLayout, spec: K8sSpec,
              env: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The objects to apply, in order: the workload, then its Service."""
    max_groups = int(validation.schema_at("spec.replicas")["maximum"]) if layout.nodes > 1 else 0
    check_spec(spec, layout.nodes, max_groups)
    refuse_loopback_head(layout, "deploy=k8s")
    service = service_name(spec, layout.nodes)
    head_port = layout.head.api_port
    if head_port is None:
        raise UsageError("the layout's head serves no API port; nothing to put a Service on")
    labels = _labels(spec)
    if layout.nodes == 1:
        template = {"metadata": {"labels": labels},
                    "spec": pod_spec(layout, spec, env, head_port, group_env=False)}
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": _metadata(spec),
                      "spec": {"replicas": spec.replicas, "selector": {"matchLabels": labels},
                               # RollingUpdate would need twice the GPUs to roll forward
                               "strategy": {"type": "Recreate"},
                               "template": template}}
        return [deployment, _service(spec, service, labels, head_port)]
    worker_port = next((w.api_port for w in layout.launches[1:] if w.serves_api), None)
    leader = {"metadata": {"labels": {**labels, "role": "leader"}},
              "spec": pod_spec(layout, spec, env, head_port, group_env=True)}
    worker = {"metadata": {"labels": {**labels, "role": "worker"}},
              "spec": pod_spec(layout, spec, env, worker_port, group_env=True)}
    lws = {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "metadata": _metadata(spec),
           "spec": {"replicas": spec.replicas,
                    "startupPolicy": "LeaderCreated",
                    "leaderWorkerTemplate": {"size": layout.nodes,
                                             "restartPolicy": "RecreateGroupOnPodRestart",
                                             "leaderTemplate": leader,
                                             "workerTemplate": worker}}}
    # Hybrid load balancing serves the API on every node: the Service spreads over all pods.
    selector = ({LWS_NAME_LABEL: spec.name} if worker_port is not None
                else {LWS_NAME_LABEL: spec.name, "role": "leader"})
    return [lws, _service(spec, service, selector, head_port)]


# -- as YAML -------------------------------------------------------------------------------
class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: Sequence[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         width=100)
