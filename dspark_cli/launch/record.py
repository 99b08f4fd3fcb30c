"""The record every launch leaves in its run directory: the resolved config, the exact env and
command as a runnable script (secrets redacted), and provenance."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.render import is_secret, shell_script


def run_dir() -> Path:
    """The Hydra job's output directory (a fresh one per run, or per multirun job)."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def redacted(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config with secret-named variables of every `env` map masked."""
    data = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "env" and isinstance(value, dict):
                    node[key] = {k: ("<redacted>" if is_secret(k) else v) for k, v in value.items()}
                else:
                    walk(value)

    walk(data)
    return data


def write_record(directory: Path, cfg: DictConfig, plan: LaunchPlan, argv: list[str],
                 provenance: dict[str, Any], notes: list[str]) -> None:
    """Write config.yaml, launch.sh and provenance.json; `notes` records explicit overrides."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(OmegaConf.to_yaml(redacted(cfg)))
    header = "#!/usr/bin/env bash\n# Written by dspark: the exact environment and command.\n"
    header += "".join(f"# NOTE: {n}\n" for n in notes)
    script = directory / "launch.sh"
    script.write_text(header + "set -euo pipefail\n" + shell_script(plan, argv))
    script.chmod(0o755)
    data = {**provenance, "notes": notes, "argv": argv,
            "command": " ".join(shlex.quote(a) for a in argv)}
    (directory / "provenance.json").write_text(json.dumps(data, indent=2) + "\n")
