"""Offline validation of Kubernetes objects, without a cluster.

Core objects go through the official `kubernetes` client's models (pydantic, `extra="forbid"`,
strict types), so an unknown field or a wrong type is an error, as the API server would make it.
The LeaderWorkerSet is a custom resource: it is checked against the real CRD LWS generates
(shipped verbatim, below), as the API server checks it, plus the LWS webhook's rule that a group
has a pod (size >= 1); the core objects inside it (metadata, pod templates, volume claim
templates) then go through the client's models too, as the StatefulSets the controller makes
from them would.

The value rules the API server applies beyond an object's schema (its
`apimachinery/pkg/util/validation`): DNS-1123/1035 names, label keys and values, resource
quantities, host paths. Each check returns why a value is refused, or None; `manifests.py`
refuses dspark's settings with them, and every object's name is checked with them: a Service's
and a LeaderWorkerSet's (which names its headless Service) are DNS-1035 labels, the rest
DNS-1123 subdomains; a namespace is a DNS-1123 label.

The LeaderWorkerSet's own schema is the CRD that LWS generates from its Go types, shipped here
verbatim (`leaderworkerset-crd.yaml.gz`) and read as the API server reads it. Provenance:
kubernetes-sigs/lws at commit 060ab4d,
`config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml` (controller-gen v0.17.2),
gzip-compressed; sha256 of the .gz 07f951b631f43a0d771f009b94ff0f663973f21e40bc73a4e745c569ef5a50b3.
Replace the file (and this note) to follow a newer LWS. Its `openAPIV3Schema` is OpenAPI v3 in
Kubernetes' structural form, checked here with jsonschema's Draft 4 (the dialect OpenAPI v3
schemas are written in) plus what the API server adds: a field the schema does not name is
refused (`kubectl apply` validates strictly; none of the CRD's objects preserves unknown
fields), `format: int32`/`int64` bound integers, and `x-kubernetes-list-type: map`/`set` lists
hold no duplicate keys.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Any

from dspark_cli.errors import CheckFailed

# -- the API server's value rules ------------------------------------------------------------
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(_LABEL)
DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
INT32_MAX = 2**31 - 1


def dns1123_label(value: str) -> str | None:
    if len(value) > 63 or not DNS1123_LABEL.fullmatch(value):
        return ("is not a DNS-1123 label (at most 63 lower-case letters, digits and '-', "
                "starting and ending with a letter or digit)")
    return None


def dns1035_label(value: str) -> str | None:
    if len(value) > 63 or not DNS1035_LABEL.fullmatch(value):
        return ("is not a DNS-1035 label (at most 63 lower-case letters, digits and '-', "
                "starting with a letter, ending with a letter or digit)")
    return None


def dns1123_subdomain(value: str) -> str | None:
    if len(value) > 253 or not DNS1123_SUBDOMAIN.fullmatch(value):
        return ("is not a DNS-1123 subdomain (at most 253 lower-case letters, digits, '-' "
                "and '.', starting and ending with a letter or digit)")
    return None


def label_key(value: str) -> str | None:
    prefix, _, name = value.rpartition("/")
    if (prefix and dns1123_subdomain(prefix)) or len(name) > 63 \
            or not QUALIFIED_NAME.fullmatch(name):
        return ("is not a label key ([prefix/]name: a DNS subdomain prefix, a name of at most "
                "63 letters, digits, '-', '_' and '.')")
    return None


def label_value(value: str) -> str | None:
    if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
        return ("is not a label value (at most 63 letters, digits, '-', '_' and '.', starting "
                "and ending with a letter or digit)")
    return None


def env_name(value: str) -> str | None:
    if not ENV_NAME.fullmatch(value):
        return "is not an environment variable name Kubernetes accepts ([-._a-zA-Z][-._a-zA-Z0-9]*)"
    return None


def quantity(value: str, positive: bool = True) -> str | None:
    """Why `value` is no resource quantity (`64Gi`, `500m`, `96`), by the kubernetes client's
    own parser; a zero or negative one where it must be positive."""
    from kubernetes.utils.quantity import parse_quantity

    try:
        parsed = parse_quantity(value)
    except (ValueError, ArithmeticError):
        return "is not a Kubernetes quantity (e.g. 64Gi, 1000Mi, 500m, 96)"
    if positive and parsed <= Decimal(0):
        return "must be more than zero"
    return None


def host_path(value: str) -> str | None:
    if not value.startswith("/"):
        return "is not an absolute path (a hostPath must be one)"
    if ".." in value.split("/"):
        return "holds '..' (the API server refuses a path that steps back)"
    return None


# -- the LeaderWorkerSet's CRD ---------------------------------------------------------------
CRD_FILE = "leaderworkerset-crd.yaml.gz"
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


@cache
def crd() -> dict[str, Any]:
    import yaml

    data = gzip.decompress(resources.files("dspark_cli.deploy.k8s").joinpath(CRD_FILE).read_bytes())
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(data, Loader=loader)


def open_api_schema(version: str = "v1") -> dict[str, Any]:
    """The CRD's `openAPIV3Schema` of `version` (the document itself, not a copy)."""
    for entry in crd()["spec"]["versions"]:
        if entry["name"] == version:
            return entry["schema"]["openAPIV3Schema"]
    raise KeyError(f"the shipped LWS CRD has no version {version}")


def _structural(node: Any) -> Any:
    """A copy of the schema where an object with `properties` refuses any other field."""
    if isinstance(node, list):
        return [_structural(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: v for k, v in node.items() if k != "description"}
    for key in ("properties", "patternProperties"):
        if key in out:
            out[key] = {k: _structural(v) for k, v in out[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict | list):
            out[key] = _structural(out[key])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in out:
            out[key] = [_structural(n) for n in out[key]]
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def _list_type(validator: Any, kind: str, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    """`x-kubernetes-list-type`: a set's items and a map's keys are unique."""
    from jsonschema import ValidationError

    if not validator.is_type(instance, "array") or kind not in ("set", "map"):
        return
    keys = schema.get("x-kubernetes-list-map-keys", [])
    seen: set[str] = set()
    for item in instance:
        key = (repr(item) if kind == "set" or not isinstance(item, dict)
               else repr(tuple(item.get(k) for k in keys)))
        if key in seen:
            what = (", ".join(f"{k}={item.get(k)!r}" for k in keys)
                    if kind == "map" and isinstance(item, dict) else repr(item))
            yield ValidationError(f"duplicate entry ({what}) in a list of unique "
                                  f"{'keys' if kind == 'map' else 'values'}")
        seen.add(key)


@cache
def validator() -> Any:
    """A jsonschema validator of LeaderWorkerSet objects against the shipped CRD."""
    from jsonschema import Draft4Validator, FormatChecker, validators

    formats = FormatChecker(formats=())
    for name, (low, high) in INT_RANGES.items():
        formats.checks(name)(lambda v, low=low, high=high: not isinstance(v, int)
                             or isinstance(v, bool) or low <= v <= high)
    kind = validators.extend(Draft4Validator, {"x-kubernetes-list-type": _list_type})
    return kind(_structural(open_api_schema()), format_checker=formats)


def schema_at(path: str) -> dict[str, Any]:
    """The CRD's schema of one field, e.g. "spec.replicas" (its `maximum`, `enum`, ...)."""
    node = open_api_schema()
    for part in path.split("."):
        node = node["properties"][part]
    return node


# -- every object's problems -----------------------------------------------------------------
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
    for e in sorted(validator().iter_errors(obj), key=lambda e: list(e.absolute_path)):
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
    "Service": dns1035_label, "LeaderWorkerSet": dns1035_label}


def _names(obj: dict[str, Any], kind: str, name: str) -> list[Problem]:
    """The object's name, namespace and labels, as the API server checks them."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return []
    checks = [("metadata.name", meta.get("name"),
               NAME_RULES.get(kind, dns1123_subdomain)),
              ("metadata.namespace", meta.get("namespace"), dns1123_label)]
    labels = meta.get("labels")
    if isinstance(labels, dict):
        checks += [(f"metadata.labels.{k}", v, label_value) for k, v in labels.items()]
        checks += [(f"metadata.labels.{k}", k, label_key) for k in labels]
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
