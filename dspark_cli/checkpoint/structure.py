"""The structural pass: every shard exists, its header is valid, and the headers agree with the
index (same tensors, in the shards the index names, adding up to its total_size).

Headers only: this never reads tensor data, so a 166 GB checkpoint takes well under a second.

Finding the files: config.json and the sharded index are parsed safely. The index is untrusted
input: a shard name that is absolute or climbs out with `..` is refused before anything is
opened. Files that are symlinks (the Hugging Face cache's `snapshots/` -> `blobs/`) are
followed; only the *names* must stay inside the directory.

Shard headers, validated by the safetensors library itself, and one tensor read alone.

`safe_open` checks what a header must satisfy (length within the file, JSON, known dtypes,
contiguous non-overlapping offsets covering the data exactly, byte length = shape x dtype size);
it maps the file instead of reading it, so a 3.5 GB shard costs its header. Tensor names come
from safetensors; the header JSON is parsed here again only for a shard holding a tensor that a
check inspects (the heads), because safetensors does not expose offsets.

Pinned checkpoint facts (`model.expected.*`, `check_pins`): each mismatch is reported as
expected vs actual; a null pin is not checked. `total_bytes` is the sum of the shard files'
sizes (headers included), the figure `du -b` gives for the *.safetensors files; `architecture`
passes when config.json's `architectures` lists it.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from dspark_cli.checkpoint.content import sha256_file
from dspark_cli.checkpoint.result import Check, Problem, problem

if TYPE_CHECKING:
    from dspark_cli.config.schema import ExpectedFacts

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


# Float dtypes a head may be stored in, with the numpy dtype that decodes them.
_FLOAT_DECODE = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2"}
FLOAT_DTYPES = tuple(_FLOAT_DECODE)
# Reading a tensor's values is for small tensors (heads), not for shards.
MAX_VALUES_BYTES = 256 * 1024 * 1024


class HeaderError(ValueError):
    """A shard's header was rejected; the message is safetensors' (or the OS's) reason."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offsets in the file
    end: int


@dataclass(frozen=True)
class ShardHeader:
    """A validated shard: its tensor names (from safetensors) and, on demand, one tensor's
    dtype, shape and offsets (parsed from the header JSON only when a check needs them)."""

    path: Path
    file_size: int
    header_len: int
    names: frozenset[str]

    @property
    def data_bytes(self) -> int:
        # safetensors checked that the tensors cover the data exactly, no gaps, no overlap
        return self.file_size - 8 - self.header_len

    @cached_property
    def _specs(self) -> dict[str, dict]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(8)
                return json.loads(fh.read(self.header_len))
        except (OSError, ValueError) as exc:
            raise HeaderError(f"header changed while reading it ({exc})") from None

    def tensor(self, name: str) -> TensorInfo:
        """One tensor's facts (HeaderError if the file changed since it was validated)."""
        try:
            spec = self._specs[name]
            start, end = spec["data_offsets"]
            base = 8 + self.header_len
            return TensorInfo(spec["dtype"], tuple(spec["shape"]), base + start, base + end)
        except (KeyError, TypeError, ValueError) as exc:
            raise HeaderError(f"header changed while reading it ({exc!r})") from None


def read_header(path: Path) -> ShardHeader:
    """Validate a shard's header with safetensors and return its tensor names (HeaderError)."""
    from safetensors import SafetensorError, safe_open

    try:
        regular = path.is_file()
    except (OSError, ValueError) as exc:  # ValueError: a name the OS cannot encode
        raise HeaderError(getattr(exc, "strerror", None) or str(exc)) from None
    if not regular:
        raise HeaderError("not a regular file")
    try:
        with safe_open(str(path), framework="numpy") as shard:
            names = frozenset(shard.keys())
        with open(path, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            size = os.fstat(fh.fileno()).st_size
    except SafetensorError as exc:
        raise HeaderError(str(exc)) from None
    except (OSError, struct.error) as exc:
        raise HeaderError(getattr(exc, "strerror", None) or str(exc)) from None
    return ShardHeader(path, size, length, names)


def count_non_finite(path: Path, info: TensorInfo) -> int | None:
    """Read one float tensor alone (pread of its bytes) and count NaN/inf values.

    None when the dtype is not a float dtype this can decode, or the tensor is too large to be a
    head.
    """
    import numpy as np

    decode = _FLOAT_DECODE.get(info.dtype)
    nbytes = info.end - info.start
    if decode is None or nbytes > MAX_VALUES_BYTES:
        return None
    try:
        with open(path, "rb") as fh:
            raw = os.pread(fh.fileno(), nbytes, info.start)
    except OSError as exc:
        raise HeaderError(exc.strerror or str(exc)) from None
    if len(raw) != nbytes:
        raise HeaderError(f"short read: {len(raw)} of {nbytes} bytes")
    values = np.frombuffer(raw, dtype=decode)
    if info.dtype == "BF16":  # bfloat16 is the top half of a float32
        values = (values.astype(np.uint32) << 16).view(np.float32)
    return int(values.size - np.count_nonzero(np.isfinite(values)))


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


PINNED = ("config_sha256", "index_sha256", "num_shards", "total_bytes", "architecture")


@dataclass(frozen=True)
class Facts:
    """What the checkpoint on disk says about itself, in the pins' terms."""

    config_sha256: str | None
    index_sha256: str | None
    num_shards: int
    total_bytes: int
    architectures: tuple[str, ...]


def _sha256_of(layout: Layout, name: str) -> str | None:
    path = layout.files.get(name)
    return None if path is None else sha256_file(path)


def gather_facts(layout: Layout) -> Facts:
    """Compute the pinned facts from disk (config and index are small; shards are only stat'ed)."""
    total = 0
    for name in layout.shards:
        with contextlib.suppress(OSError, ValueError):  # the structural pass reports it
            total += (layout.root / name).stat().st_size
    archs = (layout.config or {}).get("architectures")
    num_shards = len(layout.index.shard_names) if layout.index else len(layout.shards)
    return Facts(
        config_sha256=_sha256_of(layout, CONFIG_NAME),
        index_sha256=_sha256_of(layout, INDEX_NAME),
        num_shards=num_shards,
        total_bytes=total,
        architectures=tuple(str(a) for a in archs) if isinstance(archs, list) else (),
    )


def _fmt(value: object) -> str:
    if value is None:
        return "absent"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def check_pins(expected: ExpectedFacts, facts: Facts) -> list[Problem]:
    """Compare every non-null pin with the facts."""
    problems = []
    for key in PINNED:
        want = getattr(expected, key)
        if want is None:
            continue
        if key == "architecture":
            ok = want in facts.architectures
            have: object = ", ".join(facts.architectures) or None
        else:
            have = getattr(facts, key)
            ok = (str(want).lower() == str(have).lower()) if key.endswith("sha256") else (
                want == have
            )
        if not ok:
            problems.append(
                problem("pin-mismatch", Check.pins, f"model.expected.{key}", _fmt(want),
                        _fmt(have))
            )
    return problems
