"""A mistyped key set without `+` (`serving.extra_argz.x=1`): Hydra refuses it and suggests
`+serving.extra_argz.x=1`, which would add the typo as a new key (and then be refused by the
schema). Checked against the schema before composing, it gets a did-you-mean instead."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Iterable

from dspark_cli.config.schema import LaunchConf
from dspark_cli.errors import UsageError


def _dataclass_of(kind: object) -> type | None:
    """The dataclass a field holds (`X` or `X | None`), else None: free-form from there."""
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return kind
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if len(args) == 1 and _dataclass_of(args[0]) else None


def _unknown(key: str) -> tuple[str, list[str]] | None:
    """(the first unknown dotted prefix, close field names) of a launch setting's key; None
    when the schema has it, or it is not a launch setting (a command's own group, hydra)."""
    parts = key.split(".")
    kind: type | None = LaunchConf
    for i, part in enumerate(parts):
        if kind is None:
            return None
        fields = {f.name: f for f in dataclasses.fields(kind)}
        if part not in fields:
            if i == 0:
                return None
            return ".".join(parts[:i + 1]), difflib.get_close_matches(part, sorted(fields), n=2)
        kind = _dataclass_of(typing.get_type_hints(kind)[part])
    return None


def check_override_keys(overrides: Iterable[str]) -> None:
    """UsageError naming the close setting for a dotted key the schema lacks."""
    for line in overrides:
        key, sep, value = line.partition("=")
        if key == "runtime.expected" and value.strip() == "{}":
            # Hydra merges a map into the pins: `{}` would leave every pin as it is.
            raise UsageError("`runtime.expected={}` would change no pin (a map is merged into "
                             "the pins, not put in their place); `runtime.expected=null` "
                             "switches every pin off, `runtime.expected.<pin>=null` one.")
        if not sep or key.startswith(("+", "~")) or "." not in key or "@" in key:
            continue
        found = _unknown(key)
        if found is not None:
            wrong, close = found
            parent = wrong.rsplit(".", 1)[0]
            meant = " or ".join(f"`{parent}.{c}`" for c in close)
            where = f" (in `{key}`)" if key != wrong else ""
            raise UsageError(f"`{wrong}` is not a setting{where}"
                             + (f"; did you mean {meant}?" if close else ".")
                             + " Free-form settings live under env, extra and extra_args.")
