"""Find a checkpoint's config and shards: parse config.json and the sharded index, safely.

The index is untrusted input: a shard name that is absolute or climbs out with `..` is refused
before anything is opened. Files that are symlinks (the Hugging Face cache's `snapshots/` ->
`blobs/`) are followed; only the *names* must stay inside the directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

from dspark_cli.checkpoint.result import Check, Problem, problem

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"


class ParseError(ValueError):
    """A config or index file is not what it must be; the message says what is wrong."""


@dataclass(frozen=True)
class Index:
    """A parsed `model.safetensors.index.json`: tensor name -> shard file name."""

    weight_map: dict[str, str]  # a plain dict: compared with the headers' at C speed
    total_size: int | None
    shard_names: tuple[str, ...]  # sorted, distinct


@dataclass(frozen=True)
class Layout:
    """Where a checkpoint's pieces are; `index` is None for unsharded checkpoints."""

    root: Path
    config: Mapping[str, Any] | None
    index: Index | None
    shards: tuple[str, ...]  # relative names, all safe
    files: Mapping[str, Path] = field(default_factory=dict)  # CONFIG_NAME / INDEX_NAME -> path
    index_broken: bool = False  # an index exists but cannot be parsed


def _decode_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ParseError(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ParseError(f"{what} is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise ParseError(f"{what} is nested too deeply to be a checkpoint file") from None
    if not isinstance(value, dict):
        raise ParseError(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


def parse_config(raw: bytes) -> dict[str, Any]:
    """Parse config.json bytes into a dict (ParseError when it is not a JSON object)."""
    return _decode_object(raw, CONFIG_NAME)


def parse_index(raw: bytes) -> Index:
    """Parse index bytes; every weight_map entry must map a string to a string."""
    value = _decode_object(raw, INDEX_NAME)
    weight_map = value.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ParseError(f"{INDEX_NAME} has no weight_map object of tensor -> shard names")
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise ParseError(f"{INDEX_NAME}: weight_map[{tensor!r}] is not a shard file name")
    metadata = value.get("metadata", {})
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < 0):
        raise ParseError(f"{INDEX_NAME}: metadata.total_size {total!r} is not a byte count")
    return Index(weight_map, total, tuple(sorted(set(weight_map.values()))))


def unsafe_reason(name: str) -> str | None:
    """Why a relative file name from untrusted input may not be used, or None when it is safe."""
    if not name or "\0" in name:
        return "an empty name or a NUL byte"
    if "\\" in name:
        return "a backslash"
    path = PurePosixPath(name)
    if path.is_absolute():
        return "an absolute path"
    if ".." in path.parts:
        return "a '..' component that climbs out of the checkpoint directory"
    return None


def _read_json_file(path: Path, parse: Any, code: str) -> tuple[Any, Problem | None]:
    try:
        return parse(path.read_bytes()), None
    except ParseError as exc:
        return None, problem(code, Check.structure, path.name, "a valid file", exc)
    except OSError as exc:
        return None, problem(code, Check.structure, path.name, "a readable file", exc.strerror)


def load_layout(root: Path) -> tuple[Layout, list[Problem]]:
    """Read config.json and the index (or find the lone shards) under root; report problems."""
    problems: list[Problem] = []
    files: dict[str, Path] = {}
    config = None
    config_path = root / CONFIG_NAME
    if config_path.is_file():
        files[CONFIG_NAME] = config_path
        config, bad = _read_json_file(config_path, parse_config, "config-invalid")
        problems += [bad] if bad else []
    else:
        problems.append(
            problem("config-missing", Check.structure, CONFIG_NAME, "a file", "not found")
        )

    index_path = root / INDEX_NAME
    index = None
    if index_path.is_file():
        files[INDEX_NAME] = index_path
        index, bad = _read_json_file(index_path, parse_index, "index-invalid")
        if bad:
            broken = Layout(root, config, None, (), MappingProxyType(files), index_broken=True)
            return broken, [*problems, bad]
        names = index.shard_names
    else:
        names = tuple(sorted(p.name for p in root.glob("*.safetensors") if p.is_file()))
        if not names:
            problems.append(
                problem(
                    "weights-missing", Check.structure, str(root),
                    f"{INDEX_NAME} or *.safetensors", "neither found",
                )
            )

    safe = []
    for name in names:
        reason = unsafe_reason(name)
        if reason:
            problems.append(
                problem("shard-path-unsafe", Check.structure, name, "a relative name", reason)
            )
        else:
            safe.append(name)
    return Layout(root, config, index, tuple(safe), MappingProxyType(files)), problems
