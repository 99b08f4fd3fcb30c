"""Where dspark's config files live, installed or in a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def conf_dir() -> Path:
    """`dspark_cli/conf` in a wheel; the repository's top-level `conf/` in a source checkout."""
    packaged = _PACKAGE / "conf"
    return packaged if packaged.is_dir() else _PACKAGE.parent / "conf"
