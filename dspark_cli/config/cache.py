"""A cache of composed configs, so a repeated plan costs a file read instead of a Hydra compose.

Composition is most of a dry run's time (Hydra merges every YAML into the dataclass schemas).
The key covers everything a composition depends on: dspark's version, the primary config, the
overrides, every file under conf/ and every Python file of dspark (the schemas live in several
modules): path, size and mtime of each. Interpolations stay unresolved in the
cached value, so environment lookups still happen at use. Any cache problem means a compose.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from dspark_cli import __version__
from dspark_cli.paths import conf_dir


def cache_dir() -> Path:
    root = os.environ.get("DSPARK_CACHE_DIR") or Path.home() / ".cache" / "dspark"
    return Path(root) / "compose"


def compose_key(config: str, overrides: list[str]) -> str:
    package = Path(__file__).resolve().parents[1]
    files = []
    for root, pattern in ((conf_dir(), "*.yaml"), (package, "*.py")):
        for path in sorted(root.rglob(pattern)):
            st = path.stat()
            files.append((str(path), st.st_size, st.st_mtime_ns))
    blob = json.dumps([__version__, config, overrides, files])
    return hashlib.sha256(blob.encode()).hexdigest()


def cached_compose(config: str, overrides: list[str],
                   compose: Callable[[], DictConfig]) -> DictConfig:
    """`compose()`'s result, from the cache when this exact composition was done before."""
    path = cache_dir() / f"{compose_key(config, overrides)}.pkl"
    try:
        cfg = pickle.loads(path.read_bytes())
        if isinstance(cfg, DictConfig):
            return cfg
    except Exception:  # absent, truncated or from another library version: compose again
        pass
    cfg = compose()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(cfg))
        tmp.replace(path)
    except OSError:
        pass
    return cfg
