"""Offline validation of Kubernetes objects, without a cluster.

Core objects go through the official `kubernetes` client's models (pydantic, `extra="forbid"`,
strict types), so an unknown field or a wrong type is an error, as the API server would make it.
The LeaderWorkerSet is a custom resource: it is checked against the real CRD LWS generates
(`lws_crd.py`, shipped verbatim), as the API server checks it, plus the LWS webhook's rule that
a group has a pod (size >= 1); the core objects inside it (metadata, pod templates, volume claim
templates) then go through the client's models too, as the StatefulSets the controller makes
from them would. Every object's name is checked as the API server checks it (`k8s_names.py`):
a Service's and a LeaderWorkerSet's (which names its headless Service) are DNS-1035 labels, the
rest DNS-1123 subdomains; a namespace is a DNS-1123 label.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dspark_cli.deploy import k8s_names, lws_crd
from dspark_cli.errors import CheckFailed


@dataclass(frozen=True)
class Problem:
    """One reason an object would be refused: which object, where in it, and why."""

    kind: str
    name: str
    path: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "path": self.path, "message": self.message}

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}: {self.path or '<root>'}: {self.message}"


def _models() -> dict[str, Any]:
    from kubernetes.client import (
        V1Deployment,
        V1ObjectMeta,
        V1PersistentVolumeClaim,
        V1PodTemplateSpec,
        V1Service,
    )

    return {"Deployment": V1Deployment, "Service": V1Service, "ObjectMeta": V1ObjectMeta,
            "PodTemplateSpec": V1PodTemplateSpec, "PersistentVolumeClaim": V1PersistentVolumeClaim}


CORE = {("apps/v1", "Deployment"), ("v1", "Service")}


def _core(model: Any, obj: Any, kind: str, name: str, prefix: str) -> list[Problem]:
    from pydantic import ValidationError

    try:
        model.model_validate(obj, strict=True)
    except ValidationError as e:
        return [Problem(kind, name, ".".join(p for p in (prefix, *map(str, err["loc"])) if p),
                        err["msg"]) for err in e.errors()]
    return []


def _crd_problems(obj: dict[str, Any], name: str) -> list[Problem]:
    found = []
    for e in sorted(lws_crd.validator().iter_errors(obj), key=lambda e: list(e.absolute_path)):
        where = ".".join(map(str, e.absolute_path))
        if e.validator == "additionalProperties" and e.validator_value is False:
            found += [Problem("LeaderWorkerSet", name, f"{where}.{k}".lstrip("."),
                              "unknown field: the CRD has no such field")
                      for k in sorted(set(e.instance) - set(e.schema.get("properties", {})))]
        else:
            found.append(Problem("LeaderWorkerSet", name, where, e.message))
    return found


def _lws(obj: dict[str, Any], name: str) -> list[Problem]:
    found = _crd_problems(obj, name)
    size = obj.get("spec", {}).get("leaderWorkerTemplate", {}).get("size", 1)
    if not found and size < 1:
        found.append(Problem("LeaderWorkerSet", name, "spec.leaderWorkerTemplate.size",
                             f"{size} is less than 1 (the LWS webhook's rule: a group has a "
                             "pod)"))
    if found:
        return found
    models = _models()
    found += _core(models["ObjectMeta"], obj["metadata"], "LeaderWorkerSet", name, "metadata")
    template = obj["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        if key in template:
            found += _core(models["PodTemplateSpec"], template[key], "LeaderWorkerSet", name,
                           f"spec.leaderWorkerTemplate.{key}")
    for i, claim in enumerate(template.get("volumeClaimTemplates", [])):
        found += _core(models["PersistentVolumeClaim"], claim, "LeaderWorkerSet", name,
                       f"spec.leaderWorkerTemplate.volumeClaimTemplates.{i}")
    return found


NAME_RULES: dict[str, Callable[[str], str | None]] = {
    "Service": k8s_names.dns1035_label, "LeaderWorkerSet": k8s_names.dns1035_label}


def _names(obj: dict[str, Any], kind: str, name: str) -> list[Problem]:
    """The object's name, namespace and labels, as the API server checks them."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return []
    checks = [("metadata.name", meta.get("name"),
               NAME_RULES.get(kind, k8s_names.dns1123_subdomain)),
              ("metadata.namespace", meta.get("namespace"), k8s_names.dns1123_label)]
    labels = meta.get("labels")
    if isinstance(labels, dict):
        checks += [(f"metadata.labels.{k}", v, k8s_names.label_value) for k, v in labels.items()]
        checks += [(f"metadata.labels.{k}", k, k8s_names.label_key) for k in labels]
    found = []
    for path, value, check in checks:
        problem = check(value) if isinstance(value, str) else None
        if problem:
            found.append(Problem(kind, name, path, f"{value!r} {problem}"))
    return found


def problems(objects: Iterable[Any]) -> list[Problem]:
    """Every problem of every object; an empty list means all would be accepted."""
    found: list[Problem] = []
    models = _models()
    for obj in objects:
        if not isinstance(obj, dict):
            found.append(Problem("?", "?", "", f"not an object: {type(obj).__name__}"))
            continue
        kind, api = str(obj.get("kind", "?")), obj.get("apiVersion")
        name = str((obj.get("metadata") or {}).get("name", "?"))
        found += _names(obj, kind, name)
        if (api, kind) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"):
            found += _lws(obj, name)
        elif (api, kind) in CORE:
            found += _core(models[kind], obj, kind, name, "")
        else:
            found.append(Problem(kind, name, "apiVersion",
                                 f"{api}/{kind} is not an object dspark knows how to check"))
    return found


def require_valid_manifests(objects: Sequence[Any]) -> None:
    """CheckFailed listing every problem, if any."""
    found = problems(objects)
    if found:
        lines = "".join(f"\n  {p}" for p in found)
        raise CheckFailed(f"{len(found)} problem(s) in the Kubernetes manifests:{lines}")
