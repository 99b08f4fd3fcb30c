"""The structural pass: every shard exists, its header is valid, and the headers agree with the
index (same tensors, in the shards the index names, adding up to its total_size).

Headers only: this never reads tensor data, so a 166 GB checkpoint takes well under a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from dspark_cli.checkpoint.headers import HeaderError, ShardHeader, TensorInfo, read_header
from dspark_cli.checkpoint.index import INDEX_NAME, Layout
from dspark_cli.checkpoint.result import Check, Problem, problem


@dataclass(frozen=True)
class Structure:
    headers: Mapping[str, ShardHeader]  # shard name -> header, valid shards only
    tensors: Mapping[str, str]  # tensor name -> the shard whose header holds it
    problems: tuple[Problem, ...]

    @property
    def total_bytes(self) -> int:
        return sum(h.file_size for h in self.headers.values())

    def tensor(self, name: str) -> TensorInfo:
        """A located tensor's dtype, shape and offsets (HeaderError if unreadable)."""
        return self.headers[self.tensors[name]].tensor(name)


def _missing(path: Path) -> str | None:
    """Why path cannot be stat'ed (followed through symlinks), or None when it exists."""
    try:
        path.stat()
    except FileNotFoundError:
        return "not found"
    except (OSError, ValueError) as exc:  # too long, a loop, a name the OS cannot encode
        return getattr(exc, "strerror", None) or str(exc)
    return None


def _read_headers(layout: Layout) -> tuple[dict[str, ShardHeader], list[Problem]]:
    headers: dict[str, ShardHeader] = {}
    problems = []
    for name in layout.shards:
        path = layout.root / name
        missing = _missing(path)
        if missing:
            problems.append(problem("shard-missing", Check.structure, name, "a file", missing))
            continue
        try:
            headers[name] = read_header(path)
        except HeaderError as exc:
            problems.append(
                problem("header-invalid", Check.structure, name, "a valid safetensors header", exc)
            )
    return headers, problems


def _compare_with_index(
    layout: Layout, headers: Mapping[str, ShardHeader]
) -> tuple[dict[str, str], list[Problem]]:
    problems: list[Problem] = []
    located: dict[str, str] = {}
    for shard, header in headers.items():
        for tensor in header.names:
            if tensor in located:
                problems.append(
                    problem("tensor-duplicate", Check.structure, tensor,
                            f"in one shard ({located[tensor]})", f"also in {shard}")
                )
            else:
                located[tensor] = shard
    index = layout.index
    if index is None:
        return located, problems

    if located != index.weight_map:  # one C-level comparison in the common, healthy case
        for tensor, shard in index.weight_map.items():
            where = located.get(tensor)
            if where != shard and shard in headers:  # else the shard itself is reported
                problems.append(
                    problem("tensor-missing", Check.structure, tensor, f"in {shard}",
                            f"in {where}" if where else "in no shard")
                )
        problems += [
            problem("tensor-unlisted", Check.structure, tensor, f"listed in {INDEX_NAME}",
                    f"only in {located[tensor]}'s header")
            for tensor in located.keys() - index.weight_map.keys()
        ]
    if index.total_size is None:
        problems.append(
            problem("total-size-mismatch", Check.structure, f"{INDEX_NAME} metadata.total_size",
                    "the tensors' byte count", "absent")
        )
    elif len(headers) == len(index.shard_names):
        data = sum(h.data_bytes for h in headers.values())
        if data != index.total_size:
            problems.append(
                problem("total-size-mismatch", Check.structure,
                        f"{INDEX_NAME} metadata.total_size", f"{data:,} (sum of shard tensors)",
                        f"{index.total_size:,}")
            )
    return located, sorted(problems, key=lambda p: (p.code, p.subject))


def check_structure(layout: Layout) -> Structure:
    """Read every shard header once and check it against the index."""
    headers, problems = _read_headers(layout)
    located, mismatches = _compare_with_index(layout, headers)
    return Structure(
        MappingProxyType(headers), MappingProxyType(located), tuple(problems + mismatches)
    )
