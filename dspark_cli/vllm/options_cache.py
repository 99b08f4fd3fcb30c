"""The installed vLLM's option table, derived once per vLLM distribution, version and commit
and kept in `$DSPARK_CACHE_DIR/vllm-options/` (default `~/.cache/dspark/`).

An entry is JSON data, never code: it is read only when it is a regular file of this user's
that no one else may write (through the one strict JSON parser, `untrusted.parse_json`), and it
holds the identity it was derived for and a table in the format `options_table.checked`
enforces. Anything else (absent, corrupt, foreign, planted, a FIFO, of another vLLM) is derived
again and replaced, with one line on stderr when it was there but refused. Writes are atomic
(a reader sees the old entry or the new one), and a miss is derived under a lock, so runs
started together on a fresh machine (a test session's workers) derive it once.
DSPARK_NO_CACHE=1 reads and writes nothing: every plan derives the table.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dspark_cli.errors import UsageError
from dspark_cli.untrusted import parse_json, shown_path
from dspark_cli.vllm import options_table

Identity = dict[str, str | None]  # {"dist", "version", "commit"} of the installed vLLM
_MAX_ENTRY = 4 << 20  # bytes of one entry (a table is about 100 KB)


def cache_dir() -> Path:
    root = os.environ.get("DSPARK_CACHE_DIR") or Path.home() / ".cache" / "dspark"
    return Path(root) / "vllm-options"


def cache_enabled() -> bool:
    return os.environ.get("DSPARK_NO_CACHE", "") in ("", "0")


def entry_path(identity: Identity) -> Path:
    """`<dist>-<version>-<commit>.json`, every character outside [A-Za-z0-9.+-] as `_`."""
    parts = [str(identity.get(k) or "none") for k in ("dist", "version", "commit")]
    return cache_dir() / (re.sub(r"[^A-Za-z0-9.+-]", "_", "-".join(parts))[:200] + ".json")


_warned: set[Path] = set()


def _refused(path: Path, why: str) -> None:
    """Say once per entry and process why a cached entry was not used (it is derived again
    and replaced): a planted or corrupt entry costs a derivation, never a plan."""
    if path not in _warned:
        _warned.add(path)
        print(f"dspark: the vLLM option-table cache entry {shown_path(path)} {why}: refused, "
              "derived again from the installed vLLM", file=sys.stderr)


def load(path: Path, identity: Identity) -> dict[str, dict[str, Any]] | None:
    """The entry's options, or None unless it is a trusted entry for exactly `identity`: a
    regular file of this user's that no one else may write (a FIFO, a link or a directory at
    its name is refused without being opened for a blocking read), bounded, strict JSON no
    deeper than `untrusted.MAX_DEPTH`, in the table's format."""
    try:
        st = os.lstat(path)
    except OSError:  # absent
        return None
    if not stat.S_ISREG(st.st_mode):
        _refused(path, "is not a regular file (a link, a FIFO, a directory or a device)")
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # swapped for a link since
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o022 or (
                hasattr(os, "getuid") and st.st_uid != os.getuid()):
            _refused(path, "is not a regular file of this user's that only they can write")
            return None
        raw = f.read(_MAX_ENTRY + 1)
    try:
        if len(raw) > _MAX_ENTRY:
            raise ValueError(f"larger than {_MAX_ENTRY} bytes")
        data = parse_json(raw.decode("utf-8"), path)
        options = options_table.checked(data)
    except (UsageError, ValueError, TypeError) as e:
        _refused(path, f"is corrupt ({getattr(e, 'field', None) or type(e).__name__})")
        return None
    return options if data.get("vllm") == identity else None


def store(path: Path, identity: Identity, options: dict[str, dict[str, Any]]) -> None:
    """Write the entry atomically; a cache that cannot be written is only a slower plan."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(options_table.entry(identity, options), f, sort_keys=True)
        os.replace(tmp, path)  # replaces a planted link itself, never its target
    except OSError:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def _deriving(path: Path) -> Iterator[None]:
    """Held while `path` is derived: one process derives, the others wait and read its entry.
    A lock that cannot be taken (a read-only cache) only lets two derive at once."""
    fd = None
    with contextlib.suppress(OSError):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path.parent / ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                     0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def installed_options(identity: Identity) -> dict[str, dict[str, Any]]:
    """The installed vLLM's options: the cached entry, else derived (seconds) and cached.
    Raises options_table.DeriveError when its parser cannot be read."""
    if not cache_enabled():
        return options_table.derive()
    path = entry_path(identity)
    options = load(path, identity)
    if options is None:
        with _deriving(path):
            options = load(path, identity)  # another run may have derived it meanwhile
            if options is None:
                options = options_table.derive()
                store(path, identity, options)
    return options
