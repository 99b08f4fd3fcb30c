"""Refuse keys the schema does not define.

Hydra lets `+key=value` add a key even to a dataclass-typed node, so a typo'd appended key
would otherwise be carried silently; this walk finds every such key before anything runs.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dspark_cli.config.schema import LaunchConf
from dspark_cli.errors import UsageError


def unknown_keys(node: DictConfig, prefix: str = "") -> list[tuple[str, list[str]]]:
    """(dotted key, close field names) for each key of a dataclass node that is no field."""
    found = []
    kind = OmegaConf.get_type(node)
    fields = ({f.name for f in dataclasses.fields(kind)}
              if kind is not None and dataclasses.is_dataclass(kind) else None)
    for key in node:
        full = f"{prefix}{key!s}"
        if fields is not None and key not in fields:
            found.append((full, difflib.get_close_matches(str(key), sorted(fields), n=2)))
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            found += unknown_keys(child, full + ".")
    return found


def dataclass_of(kind: object) -> type | None:
    """The dataclass a field holds (`X` or `X | None`), else None: free-form from there."""
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return kind
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if len(args) == 1 and dataclass_of(args[0]) else None


def placements(leaf: str, kind: type = LaunchConf, prefix: str = "") -> list[str]:
    """Every dotted key of the schema whose last part is `leaf` (`max_num_seqs` ->
    `serving.args.max_num_seqs`)."""
    found = []
    hints = typing.get_type_hints(kind)
    for f in dataclasses.fields(kind):
        if f.name == leaf:
            found.append(prefix + f.name)
        inner = dataclass_of(hints[f.name])
        if inner is not None:
            found += placements(leaf, inner, f"{prefix}{f.name}.")
    return found


def check_known_keys(cfg: DictConfig) -> None:
    """Raise a UsageError naming every key the schema does not know (and what was meant)."""
    problems = unknown_keys(cfg)
    if problems:
        parts = []
        for key, close in problems:
            moved = placements(key.rsplit(".", 1)[-1])
            meant = [f"`{m}`" for m in moved[:2]] or close
            parts.append(f"`{key}`" + (f" (did you mean {' or '.join(meant)}?)" if meant else ""))
        raise UsageError(f"unknown config key {', '.join(parts)}: the schema has no such "
                         "setting. Free-form settings live under env, extra and extra_args.")


def out_of_range(node: DictConfig, prefix: str = "") -> list[str]:
    """`key=value` and its allowed range, for each schema field whose value is outside the
    domain declared in the schema (`metadata=between(...)`)."""
    found = []
    kind = OmegaConf.get_type(node)
    domains = ({f.name: f.metadata["domain"] for f in dataclasses.fields(kind)
                if "domain" in f.metadata}
               if kind is not None and dataclasses.is_dataclass(kind) else {})
    for key in node:
        child = node._get_node(key)
        if child is None or child._is_missing():
            continue
        if isinstance(child, DictConfig):
            if not child._is_none():
                found += out_of_range(child, f"{prefix}{key!s}.")
            continue
        if key not in domains:
            continue
        try:
            value = node[key]
            items = list(value) if isinstance(child, ListConfig) else [value]
        except OmegaConfBaseException:
            continue  # an unresolvable interpolation: reported where it is used
        for item in items:
            problem = domains[key].problem(item)
            if problem:
                shown = (f"`{prefix}{key}` value {item!r}" if isinstance(child, ListConfig)
                         or not str(item).isprintable() else f"`{prefix}{key}={item}`")
                found.append(f"{shown} {problem}: allowed {domains[key].describe()}")
    return found


def check_ranges(cfg: DictConfig) -> None:
    """Raise a UsageError naming every value outside its field's allowed range."""
    problems = out_of_range(cfg)
    if problems:
        raise UsageError("; ".join(problems) + ". Nothing was started.")
