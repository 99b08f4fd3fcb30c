"""Hash many large files in parallel, with a progress bar (bytes, rate, ETA) on stderr.

Threads suffice: hashlib is OpenSSL's SHA-256 (SHA-NI where the CPU has it) and releases the
GIL while it hashes a buffer, and `readinto` releases it while it reads. One file is hashed by
one thread (SHA-256 is sequential), so files go out largest first to keep every core busy to the
end. `benchmarks/checkpoint_hashing.py` compares this with parallel `openssl dgst -sha256`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

CHUNK_BYTES = 1024 * 1024  # per-thread read buffer
SHA256 = "sha256"
GIT_SHA1 = "git-sha1"  # a git blob id: sha1(b"blob <size>\0" + content), as HF names small blobs
ALGORITHMS = (SHA256, GIT_SHA1)


@dataclass(frozen=True)
class HashJob:
    key: str  # how results are named (a path relative to the checkpoint)
    path: Path
    algorithms: tuple[str, ...] = (SHA256,)


@dataclass(frozen=True)
class HashOutcome:
    digests: Mapping[str, str]  # algorithm -> hex digest; empty when the file could not be read
    size: int
    error: str | None = None


def default_workers() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _new_hasher(algorithm: str, size: int) -> hashlib._Hash:
    if algorithm == SHA256:
        return hashlib.sha256()
    if algorithm == GIT_SHA1:
        return hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    raise ValueError(f"unknown hash algorithm {algorithm!r}")


def hash_file(
    path: Path,
    algorithms: Iterable[str] = (SHA256,),
    on_bytes: Callable[[int], None] | None = None,
) -> HashOutcome:
    """Hash one file with each algorithm in a single read; errors become the outcome's `error`."""
    buf = bytearray(CHUNK_BYTES)
    view = memoryview(buf)
    try:
        with open(path, "rb", buffering=0) as fh:
            size = os.fstat(fh.fileno()).st_size
            hashers = {a: _new_hasher(a, size) for a in algorithms}
            seen = 0
            while n := fh.readinto(view):
                for h in hashers.values():
                    h.update(view[:n])
                seen += n
                if on_bytes:
                    on_bytes(n)
    except OSError as exc:
        return HashOutcome({}, 0, exc.strerror or str(exc))
    if seen != size:
        return HashOutcome({}, seen, f"size changed while hashing ({size} -> {seen} bytes)")
    return HashOutcome({a: h.hexdigest() for a, h in hashers.items()}, size)


def sha256_file(path: Path) -> str | None:
    """One file's SHA-256 (hex), or None when it cannot be read."""
    return hash_file(path).digests.get(SHA256)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def hash_files(
    jobs: Iterable[HashJob], workers: int | None = None, progress: bool | None = None
) -> dict[str, HashOutcome]:
    """Hash every job's file on `workers` threads; show a progress bar when stderr is a tty."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    sized = sorted(((_size(j.path), j) for j in jobs), key=lambda sj: -sj[0])
    total = sum(s for s, _ in sized)
    workers = max(1, min(workers or default_workers(), len(sized) or 1))
    console = Console(stderr=True)
    bar = Progress(
        TextColumn("hashing {task.fields[files]} files"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not (console.is_terminal if progress is None else progress),
    )
    with bar, ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hash") as pool:
        task = bar.add_task("hash", total=total, files=len(sized))

        def advance(n: int) -> None:
            bar.advance(task, n)

        futures = {
            j.key: pool.submit(hash_file, j.path, j.algorithms, advance) for _, j in sized
        }
        return {key: f.result() for key, f in futures.items()}

