"""The LeaderWorkerSet's own schema: the CRD that LWS generates from its Go types, shipped here
verbatim (`leaderworkerset-crd.yaml.gz`) and read as the API server reads it.

Provenance: kubernetes-sigs/lws at commit 060ab4d,
`config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml` (controller-gen v0.17.2),
gzip-compressed; sha256 of the .gz 07f951b631f43a0d771f009b94ff0f663973f21e40bc73a4e745c569ef5a50b3.
Replace the file (and this note) to follow a newer LWS.

Its `openAPIV3Schema` is OpenAPI v3 in Kubernetes' structural form, checked here with
jsonschema's Draft 4 (the dialect OpenAPI v3 schemas are written in) plus what the API server
adds: a field the schema does not name is refused (`kubectl apply` validates strictly; none of
the CRD's objects preserves unknown fields), `format: int32`/`int64` bound integers, and
`x-kubernetes-list-type: map`/`set` lists hold no duplicate keys.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

CRD_FILE = "leaderworkerset-crd.yaml.gz"
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


@cache
def crd() -> dict[str, Any]:
    import yaml

    data = gzip.decompress(resources.files("dspark_cli.deploy").joinpath(CRD_FILE).read_bytes())
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
