"""Content hashes: every file hashed in parallel, checked against a sha256sum manifest and
against the Hugging Face cache blobs' own names (the only check that reads tensor data).

Hash many large files in parallel, with a progress bar (bytes, rate, ETA) on stderr.

Threads suffice: hashlib is OpenSSL's SHA-256 (SHA-NI where the CPU has it) and releases the
GIL while it hashes a buffer, and `readinto` releases it while it reads. One file is hashed by
one thread (SHA-256 is sequential), so files go out largest first to keep every core busy to the
end. `benchmarks/checkpoint_hashing.py` compares this with parallel `openssl dgst -sha256`.

SHA-256 manifests in the format `sha256sum` writes and `sha256sum -c` reads, and Hugging Face
cache blobs, which carry their own hash as their file name.

A manifest lists every file of the checkpoint by its path relative to the checkpoint directory
(hidden files and folders, such as `.cache/`, are left out), so `cd DIR && sha256sum -c FILE`
verifies it too. Names holding a backslash, newline or carriage return are escaped the way GNU
coreutils does (a leading backslash on the line).

Reading accepts what GNU `sha256sum -c` (coreutils 9) accepts, rule for rule: `<hash>  name`,
`<hash> *name` (binary mode), `<hash> name` (BSD `-r`; not mixed with the other form in one
file), `SHA256 (name) = <hash>` (`--tag`), escaped lines, upper-case hex, leading blanks, `#`
comments, empty lines and CRLF line ends. Names are taken relative to the checkpoint: `./a`,
`.//a` and `a` are one file. Stricter in one way only, failing closed: a line `sha256sum -c`
skips with a warning ("improperly formatted") is refused, since it may be a file never checked.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from dspark_cli.checkpoint.result import Check, Content, Problem, problem

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


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {"\\": "\\", "n": "\n", "r": "\r"}
_BLANK = " \t"
_HEXDIGITS = frozenset("0123456789abcdefABCDEF")
_TAG = "SHA256"
_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


class ManifestError(ValueError):
    """The manifest file cannot be used; the message names the line."""


def is_file(path: Path) -> bool:
    """Path.is_file for untrusted names: a name too long or not encodable is no file."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def list_checkpoint_files(root: Path) -> list[str]:
    """Every regular file under root (symlinks to files followed), as sorted relative paths."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            path = Path(dirpath, name)
            if not name.startswith(".") and path.is_file():
                found.append(path.relative_to(root).as_posix())
    return sorted(found)


def format_manifest(digests: Mapping[str, str]) -> str:
    """`sha256sum` output for these relative paths, sorted by path."""
    lines = []
    for name, digest in sorted(digests.items()):
        escaped = "".join(_ESCAPES.get(c, c) for c in name)
        prefix = "\\" if escaped != name else ""
        lines.append(f"{prefix}{digest}  {escaped}\n")
    return "".join(lines)


def parse_manifest(text: str) -> dict[str, str]:
    """Relative path -> lowercase SHA-256 from a manifest `sha256sum -c` accepts (ManifestError
    names a line it would skip or a file listed twice with different hashes)."""
    entries: dict[str, str] = {}
    reversed_form: list[bool] = []  # set by the first untagged line, as coreutils does
    for number, line in enumerate(text.split("\n"), start=1):
        if line.startswith("#"):
            continue
        line = line.removesuffix("\r")
        if not line:
            continue
        parsed = _parse_line(line, reversed_form)
        if parsed is None:
            raise ManifestError(
                f"line {number} is not a sha256sum line ('<sha256>  <path>', '<sha256> *<path>' "
                f"or 'SHA256 (<path>) = <sha256>'): {line[:80]!r}")
        name, digest = normalize_name(parsed[0]), parsed[1].lower()
        if entries.get(name, digest) != digest:
            raise ManifestError(f"line {number} lists {name!r} again with another hash")
        entries[name] = digest
    if not entries:
        raise ManifestError("it lists no files")
    return entries


def _parse_line(line: str, reversed_form: list[bool]) -> tuple[str, str] | None:
    """(name, hex digest) of one line, or None where coreutils' split_3 rejects it."""
    i = len(line) - len(line.lstrip(_BLANK))
    escaped = line[i:i + 1] == "\\"
    i += escaped
    if line.startswith(_TAG, i):
        i += len(_TAG) + (line[i + len(_TAG):i + len(_TAG) + 1] == " ")
        if line[i:i + 1] != "(" or (close := line.rfind(")")) <= i:
            return None
        name, rest = line[i + 1:close], line[close + 1:].lstrip(_BLANK)
        digest = rest[1:].lstrip(_BLANK) if rest.startswith("=") else ""
    else:
        end = i
        while end < len(line) and line[end] in _HEXDIGITS:
            end += 1
        digest, i = line[i:end], end + 1
        if end >= len(line) - 1 or line[end] not in _BLANK:
            return None
        if len(line) - i == 1 or line[i] not in " *":  # `<hash> name`, as BSD's `md5 -r`
            if reversed_form and not reversed_form[0]:
                return None
            reversed_form[:] = [True]
        elif not reversed_form or not reversed_form[0]:
            reversed_form[:] = [False]
            i += 1
        name = line[i:]
    if len(digest) != 64 or not _HEXDIGITS.issuperset(digest):
        return None
    if escaped:
        unescaped = _unescape(name)
        if unescaped is None:
            return None
        name = unescaped
    return name, digest


def _unescape(name: str) -> str | None:
    """GNU's escaping undone (`\\\\`, `\\n`, `\\r`); None for any other backslash."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "\\":
            char = _UNESCAPES.get(name[i + 1:i + 2])
            if char is None:
                return None
            out.append(char)
            i += 2
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def normalize_name(name: str) -> str:
    """The checkpoint-relative name `sha256sum -c` would open: `./a` and `.//a` are `a`;
    absolute and climbing names are kept as given, for `unsafe_name` to refuse."""
    if name.startswith("/"):
        return name
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return "/".join(parts) or name


def unsafe_name(name: str) -> str | None:
    """Why a manifest's name may not be read inside the checkpoint, or None when it is safe.
    Backslashes are ordinary characters in a POSIX name, as for `sha256sum`."""
    if not name or "\0" in name:
        return "an empty name or a NUL byte"
    if name.startswith("/"):
        return "an absolute path: dspark reads nothing outside the checkpoint"
    if ".." in name.split("/"):
        return "a '..' component that climbs out of the checkpoint directory"
    return None


def blob_expectation(path: Path) -> tuple[str, str] | None:
    """(algorithm, digest) a Hugging Face cache blob's own name promises, or None.

    Large (LFS) files are stored as `blobs/<sha256>`, small ones as `blobs/<git blob sha1>`.
    """
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if target.parent.name != "blobs":
        return None
    if _HEX64.fullmatch(target.name):
        return SHA256, target.name
    if _HEX40.fullmatch(target.name):
        return GIT_SHA1, target.name
    return None


def compare_with_manifest(
    expected: Mapping[str, str], root: Path, listed_on_disk: Iterable[str],
    digests: Mapping[str, str | None],
) -> list[Problem]:
    """Name every mismatch, missing and extra file; `digests` holds what was hashed."""
    problems = []
    for name, want in sorted(expected.items()):
        reason = unsafe_name(name)
        if reason:
            problems.append(
                problem("manifest-path-unsafe", Check.content, name, "a relative path", reason)
            )
        elif not is_file(root / name):
            problems.append(problem("file-missing", Check.content, name, "a file", "not found"))
        elif (have := digests.get(name)) is not None and have != want:
            problems.append(problem("hash-mismatch", Check.content, name, want, have))
    for name in listed_on_disk:
        if name not in expected:
            problems.append(
                problem("file-extra", Check.content, name, "not in the manifest", "present")
            )
    return problems


def write_refusal(target: Path, protected: Iterable[Path]) -> str | None:
    """Why the manifest may not be written to target (inside the checkpoint), or None."""
    where = target.expanduser().resolve().parent
    for root in protected:
        if where == root or where.is_relative_to(root):
            return f"{target} is inside {root}, and dspark never writes into a checkpoint"
    return None


def write_manifest(target: Path, text: str) -> None:
    """Write atomically: a reader never sees half a manifest, and a failure leaves none."""
    target = target.expanduser()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class ContentRequest:
    """Which file contents to hash: blobs always; manifest entries; or every file."""

    manifest: Mapping[str, str] | None = None  # verify against this (relative path -> sha256)
    every_file: bool = False  # hash every file, for a manifest to be written
    # Files the manifest need not list: the manifest itself, kept in the checkpoint (`sha256sum
    # -c` never asks a manifest to list itself).
    unlisted_ok: frozenset[str] = frozenset()
    workers: int | None = None
    progress: bool | None = None


def _jobs(root: Path, on_disk: list[str], request: ContentRequest) -> dict[str, HashJob]:
    wanted = set(on_disk) if request.every_file else set()
    if request.manifest is not None:
        wanted |= {
            n for n in request.manifest if not unsafe_name(n) and is_file(root / n)
        }
    jobs = {}
    for name in sorted(wanted | set(on_disk)):
        algorithms = {SHA256} if name in wanted else set()
        blob = blob_expectation(root / name)
        if blob:
            algorithms.add(blob[0])
        if algorithms:
            jobs[name] = HashJob(name, root / name, tuple(sorted(algorithms)))
    return jobs


def check_content(root: Path, request: ContentRequest) -> tuple[Content, list[Problem]]:
    """Hash what the request asks for; check blobs against their names and the manifest."""
    on_disk = list_checkpoint_files(root)
    jobs = _jobs(root, on_disk, request)
    start = time.perf_counter()
    outcomes = hash_files(jobs.values(), request.workers, request.progress)
    seconds = time.perf_counter() - start

    problems = []
    sha256: dict[str, str | None] = {}
    blobs_checked = 0
    for name, outcome in sorted(outcomes.items()):
        if outcome.error:
            problems.append(
                problem("file-unreadable", Check.content, name, "a readable file", outcome.error)
            )
            sha256[name] = None
            continue
        sha256[name] = outcome.digests.get(SHA256)
        blob = blob_expectation(root / name)
        if blob:
            blobs_checked += 1
            algorithm, want = blob
            if outcome.digests[algorithm] != want:
                problems.append(
                    problem("blob-hash-mismatch", Check.content, name,
                            f"{algorithm} {want} (the blob's name)",
                            outcome.digests[algorithm])
                )
    if request.manifest is not None:
        problems += compare_with_manifest(
            request.manifest, root, [n for n in on_disk if n not in request.unlisted_ok], sha256)
    digests = {n: d for n, d in sha256.items() if d is not None}
    content = Content(
        hashed_files=len(outcomes),
        hashed_bytes=sum(o.size for o in outcomes.values()),
        against_manifest=sum(1 for n in request.manifest or {} if n in digests),
        against_blob_name=blobs_checked,
        seconds=round(seconds, 3),
        digests=MappingProxyType(digests),
    )
    return content, problems
