"""A cache of composed configs, so a repeated plan costs a file read instead of a Hydra compose.

Composition is most of a dry run's time (Hydra merges every YAML into the dataclass schemas).
The key covers everything a composition depends on: dspark's version, the primary config, the
overrides, every file under conf/ and every Python file of dspark (the schemas live in several
modules): path, size and mtime of each. An entry is named by a 64-bit checksum of the key and
holds the key itself, so a checksum collision is a miss, never a wrong config. Interpolations
stay unresolved in the cached value, so environment lookups still happen at use. Any cache
problem means a compose.

The directory may be shared, so an entry is data that cannot run code when read: JSON holding
the plain config and the name of its root schema, a dataclass of a `dspark_cli.*.schema` module.
Reading merges the data into that schema again, which restores every typed node and enum and
re-validates every value. Writes are atomic; at most MAX_ENTRIES entries are kept (the least
recently used go first). DSPARK_NO_CACHE=1 turns the cache off; DSPARK_CACHE_DIR moves it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from dspark_cli import __version__
from dspark_cli.paths import conf_dir

FORMAT = 3  # 1 was pickle, never read again; 2 had no key in the entry
MAX_ENTRIES = 64


def cache_dir() -> Path:
    root = os.environ.get("DSPARK_CACHE_DIR") or Path.home() / ".cache" / "dspark"
    return Path(root) / "compose"


def enabled() -> bool:
    return os.environ.get("DSPARK_NO_CACHE", "") in ("", "0")


def key_text(config: str, overrides: list[str]) -> str:
    """Everything the composition depends on, as text."""
    package = Path(__file__).resolve().parents[1]
    files = _stats(conf_dir(), ".yaml") + _stats(package, ".py")
    return json.dumps([FORMAT, __version__, config, overrides, files])


def _stats(root: Path, suffix: str) -> list[tuple[str, int, int]]:
    """(path, size, mtime) of every file under `root` named `*suffix`, sorted by path: os.walk,
    since pathlib's rglob costs a first dry run five times as much."""
    found = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        for name in names:
            if name.endswith(suffix):
                path = os.path.join(directory, name)
                st = os.stat(path)
                found.append((path, st.st_size, st.st_mtime_ns))
    return sorted(found)


def entry_name(key: str) -> str:
    """A 64-bit checksum of the key: zlib's, not hashlib's, since loading OpenSSL is a
    measurable share of a dry run; the entry's own copy of the key rules out collisions."""
    data = key.encode()
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


def compose_key(config: str, overrides: list[str]) -> str:
    """The entry's file name (without .json) for this composition."""
    return entry_name(key_text(config, overrides))


def cached_compose(config: str, overrides: list[str],
                   compose: Callable[[], DictConfig]) -> DictConfig:
    """`compose()`'s result, from the cache when this exact composition was done before."""
    if not enabled() or any(_may_hold_secret(o) for o in overrides):
        return compose()
    key = key_text(config, overrides)
    path = cache_dir() / f"{entry_name(key)}.json"
    cfg = load(path, key)
    if cfg is None:
        cfg = compose()
        store(path, key, cfg)
    return cfg


_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL")


def _may_hold_secret(override: str) -> bool:
    """An override that may carry a secret (a token-like key, a URL with a password): its
    composition is never written to the cache, whose entries hold the overrides and config."""
    key, _, value = override.partition("=")
    return any(w in key.upper() for w in _SECRET_WORDS) or "@" in value


def load(path: Path, key: str) -> DictConfig | None:
    """The entry as a typed, struct config; None when it is absent, not a valid entry, or the
    entry of another key."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if entry["key"] != key:
            return None
        cfg = OmegaConf.merge(OmegaConf.structured(_schema(entry["schema"])), entry["config"])
    except Exception:  # absent, truncated, foreign or stale: compose again
        return None
    OmegaConf.set_struct(cfg, True)
    with contextlib.suppress(OSError):  # a read-only shared cache still serves
        os.utime(path)  # recently used: evicted last
    return cfg


def _schema(name: str) -> type:
    """The root schema named `module:qualname`: only a dataclass of a dspark schema module."""
    module, _, qualname = name.partition(":")
    if not (module.startswith("dspark_cli.") and module.endswith(".schema")):
        raise ValueError(f"not a dspark schema: {name}")
    kind = getattr(importlib.import_module(module), qualname)
    if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
        raise ValueError(f"not a dataclass: {name}")
    return kind


def store(path: Path, key: str, cfg: DictConfig) -> None:
    """Write the entry atomically (a reader sees the old file or the new one), then evict."""
    kind = OmegaConf.get_type(cfg)
    if kind is None or not dataclasses.is_dataclass(kind):
        return
    entry = {"key": key, "schema": f"{kind.__module__}:{kind.__qualname__}",
             "config": OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(entry), encoding="utf-8")
        tmp.replace(path)
        evict(path.parent, MAX_ENTRIES)
    except (OSError, TypeError, ValueError):  # read-only or full disk, unserialisable value
        tmp.unlink(missing_ok=True)


def evict(directory: Path, keep: int) -> None:
    """Remove all but the `keep` most recently used entries."""
    entries = []
    for path in directory.glob("*.json"):
        try:
            entries.append((path.stat().st_mtime_ns, path))
        except OSError:  # removed by another process meanwhile
            continue
    for _, path in sorted(entries, reverse=True)[keep:]:
        path.unlink(missing_ok=True)
