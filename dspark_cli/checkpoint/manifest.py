"""SHA-256 manifests in the format `sha256sum` writes and `sha256sum -c` reads, and Hugging Face
cache blobs, which carry their own hash as their file name.

A manifest lists every file of the checkpoint by its path relative to the checkpoint directory
(hidden files and folders, such as `.cache/`, are left out), so `cd DIR && sha256sum -c FILE`
verifies it too. Names holding a backslash, newline or carriage return are escaped the way GNU
coreutils does (a leading backslash on the line).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from dspark_cli.checkpoint.hashing import GIT_SHA1, SHA256
from dspark_cli.checkpoint.index import unsafe_reason
from dspark_cli.checkpoint.report import Check, Problem, problem

_LINE = re.compile(r"(?P<esc>\\?)(?P<hex>[0-9a-fA-F]{64}) (?P<mode>[ *])(?P<name>.+)")
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {"\\\\": "\\", "\\n": "\n", "\\r": "\r"}
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
    """Relative path -> lowercase SHA-256 from `sha256sum` output (ManifestError if malformed)."""
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise ManifestError(f"line {number} is not '<sha256>  <path>': {line[:80]!r}")
        name = match["name"]
        if match["esc"]:
            name = re.sub(r"\\[\\nr]", lambda m: _UNESCAPES[m.group()], name)
        digest = match["hex"].lower()
        if entries.get(name, digest) != digest:
            raise ManifestError(f"line {number} lists {name!r} again with another hash")
        entries[name] = digest
    if not entries:
        raise ManifestError("it lists no files")
    return entries


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
        reason = unsafe_reason(name)
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
