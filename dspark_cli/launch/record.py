"""The record every launch leaves in its run directory: the resolved config, the exact env and
command as a runnable script (secrets redacted), and provenance."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.config.typed import plain, to_yaml
from dspark_cli.launch import secrets
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.render import shell_script
from dspark_cli.paths import CONFIG_YAML, LAUNCH_SH, PROVENANCE_JSON
from dspark_cli.untrusted import write_atomic

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


def run_dir() -> Path:
    """The Hydra job's output directory (a fresh one per run, or per multirun job)."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def redacted(cfg: LaunchConf) -> dict[str, Any]:
    """The resolved config with every secret masked (launch/secrets.py says what one is)."""
    return secrets.redact(plain(cfg))


def write_config(directory: Path, cfg: LaunchConf) -> None:
    """config.yaml, the one writer of it: the resolved config with secrets redacted by key, and
    every secret value this process knows scrubbed wherever else it sits."""
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(directory / CONFIG_YAML, secrets.SCRUB(to_yaml(redacted(cfg))))


def write_record(directory: Path, cfg: LaunchConf, plan: LaunchPlan, argv: list[str],
                 provenance: dict[str, Any], notes: list[str]) -> None:
    """Write config.yaml, launch.sh and provenance.json; `notes` records explicit overrides."""
    write_config(directory, cfg)
    scrub = secrets.SCRUB
    header = "#!/usr/bin/env bash\n# Written by dspark: the exact environment and command.\n"
    header += "".join(f"# NOTE: {n}\n" for n in notes)
    script = directory / LAUNCH_SH
    write_atomic(script, scrub(header + "set -euo pipefail\n" + shell_script(plan, argv)))
    script.chmod(0o755)
    data = {**provenance, "notes": notes, "argv": argv,
            "command": " ".join(shlex.quote(a) for a in argv)}
    write_atomic(directory / PROVENANCE_JSON, scrub(json.dumps(data, indent=2) + "\n"))
