"""Shared test helpers: compose configs in-process and run the real `dspark` CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from dspark_cli.config import schema
from dspark_cli.paths import conf_dir

REPO = Path(__file__).resolve().parent.parent


def compose_config(overrides: list[str], config: str = "serve") -> DictConfig:
    """The config `dspark <config> <overrides>` would run with (no detection: pass +hw)."""
    schema.register()
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        return compose(config, overrides=overrides)


def run_dspark(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess, as a user would."""
    return subprocess.run([sys.executable, "-m", "dspark_cli.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or REPO,
                          env={**os.environ, **(env or {})})
