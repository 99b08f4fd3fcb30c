"""`deploy.k8s` as the manifests need it (`K8sSpec`), and every value of it the API server
would refuse, refused first with the key to change (`check_spec`): nothing is printed or
applied from settings a cluster would reject late or run wrong. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dspark_cli.deploy import k8s_names
from dspark_cli.errors import UsageError
from dspark_cli.launch.secrets import redact_urls

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
        ("namespace", spec.namespace, k8s_names.dns1123_label),
        ("secret_name", spec.secret_name, k8s_names.dns1123_subdomain),
        ("model_pvc", spec.model_pvc, k8s_names.dns1123_subdomain),
        ("model_host_path", spec.model_host_path, k8s_names.host_path),
        ("shm_size", spec.shm_size, k8s_names.quantity),
        ("cpu", spec.cpu, k8s_names.quantity),
        ("memory", spec.memory, k8s_names.quantity),
    ]
    for key, value in (spec.node_selector or {}).items():
        checks += [(f"node_selector key {key!r}", key, k8s_names.label_key),
                   (f"node_selector.{key}", value, k8s_names.label_value)]
    return [(k, v, c) for k, v, c in checks if v is not None]


def check_spec(spec: K8sSpec, nodes: int, max_groups: int) -> None:
    """Refuse what a cluster would refuse late or run wrong: names that are no DNS names,
    quantities that do not parse, a relative host path, two model volumes, counts outside
    int32 (or, for a LeaderWorkerSet of `nodes` > 1, past the CRD's `max_groups`). (The image
    is `image_problem`'s: a check a dry run reports, not a reason to print nothing.)"""
    problem = k8s_names.dns1035_label(spec.name)
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
        if not 1 <= value <= k8s_names.INT32_MAX:
            raise UsageError(f"deploy.k8s.{key} must be 1 to {k8s_names.INT32_MAX} (an int32), "
                             f"not {value}")
    if nodes > 1 and spec.replicas > max_groups:
        raise UsageError(f"deploy.k8s.replicas={spec.replicas}: a LeaderWorkerSet takes at most "
                         f"{max_groups} groups (its CRD's maximum)")
    for key in ("nccl_socket_ifname", "gloo_socket_ifname"):
        value = getattr(spec, key)
        if value is not None and (not value.strip() or not value.isprintable()):
            raise UsageError(f"deploy.k8s.{key}={value!r} is no interface name (e.g. eth0, "
                             "or ^lo,docker to exclude)")
