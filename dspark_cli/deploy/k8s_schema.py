"""Offline validation of Kubernetes objects, without a cluster.

Core objects go through the official `kubernetes` client's models (pydantic, `extra="forbid"`,
strict types), so an unknown field or a wrong type is an error, as the API server would make it.
The LeaderWorkerSet is a custom resource no package ships a schema for: its own fields are
checked with `lws.schema.json` (written from the LWS API reference), and the core objects inside
it (metadata, pod templates, volume claim templates) with the client's models again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

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


@cache
def lws_schema() -> dict[str, Any]:
    text = resources.files("dspark_cli.deploy").joinpath("lws.schema.json").read_text()
    return json.loads(text)


def _lws(obj: dict[str, Any], name: str) -> list[Problem]:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(lws_schema())
    found = [Problem("LeaderWorkerSet", name, ".".join(map(str, e.absolute_path)), e.message)
             for e in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))]
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
