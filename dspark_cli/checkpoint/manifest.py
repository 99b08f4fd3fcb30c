"""SHA-256 manifests in the format `sha256sum` writes and `sha256sum -c` reads, and Hugging Face
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

import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from dspark_cli.checkpoint.hashing import GIT_SHA1, SHA256
from dspark_cli.checkpoint.result import Check, Problem, problem

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
