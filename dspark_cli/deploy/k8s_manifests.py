"""A node layout as Kubernetes objects: a LeaderWorkerSet for more than one node, a Deployment
for one node per replica, and a Service in front of the API server(s). Pure: dicts in the API's
own field names, validated by `k8s_schema` and rendered as YAML by `k8s_render`.

The pods run the layout's rank dispatch in bash: LWS injects `LWS_LEADER_ADDRESS`,
`LWS_WORKER_INDEX` and `LWS_GROUP_SIZE` into every container, so the rank and the head address
come from the engine at run time and the group size is checked against the layout.

No secret is written: a secret-named variable and every URL password
(`DSPARK_URL_PASSWORD_N`, referred to as `${VAR}` in the script and `$(VAR)` in env values)
come from the Secret `secret_name` through `secretKeyRef`; `create_secret_line` says how to
make it. Kubernetes expands `$(VAR)` in commands and env values, so a literal `$(` or `$$` is
escaped (`$$(`, `$$$`) to reach the container unchanged.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dspark_cli.deploy import k8s_names
from dspark_cli.deploy.k8s_spec import IMAGE_UNSET, K8sSpec, check_spec, local_model
from dspark_cli.deploy.lws_crd import schema_at
from dspark_cli.deploy.node_script import (
    HEAD_VAR,
    command_text,
    dispatch,
    refuse_loopback_head,
    secret_environment,
    url_refs,
)
from dspark_cli.errors import UsageError
from dspark_cli.launch.layout import NodeLayout
from dspark_cli.launch.render import is_secret
from dspark_cli.launch.secrets import ShellRefs

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
        problem = k8s_names.env_name(name)
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
    max_groups = int(schema_at("spec.replicas")["maximum"]) if layout.nodes > 1 else 0
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
