"""Shard headers, validated by the safetensors library itself, and one tensor read alone.

`safe_open` checks what a header must satisfy (length within the file, JSON, known dtypes,
contiguous non-overlapping offsets covering the data exactly, byte length = shape x dtype size);
it maps the file instead of reading it, so a 3.5 GB shard costs its header. Tensor names come
from safetensors; the header JSON is parsed here again only for a shard holding a tensor that a
check inspects (the heads), because safetensors does not expose offsets.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

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
