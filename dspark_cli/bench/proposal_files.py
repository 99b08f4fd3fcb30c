"""The proposal of a bench run directory on disk: its inputs read from the run (the arms'
profiles, the run's own launch overrides, what the installed vLLM has), proposal.json written,
and every proposed `dspark serve` command put through the same dry-run preflight
(`--dry-run --validate`, vLLM's own parser included), its outcome recorded beside it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from dspark_cli.bench import proposal
from dspark_cli.bench.summary import Summary
from dspark_cli.paths import conf_dir
from dspark_cli.run_files import ARMS_DIR, CONFIG_YAML
from dspark_cli.vllm.speculative_fields import has_field

# Overrides of the run that are not the launch a proposal keeps: the protocol, the run's own
# directory and ports, and the drafter the proposal replaces.
_NOT_LAUNCH = ("bench", "+bench", "hydra", "validate", "+validate", "speculative", "server.")
PREFLIGHT_TIMEOUT_S = 300.0


def _yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, yaml.YAMLError):
        return None


def _profile(directory: Path, arm: str) -> dict[str, Any]:
    """The arm's profile as the config group holds it, else as its run record resolved it."""
    own = _yaml(conf_dir() / "speculative" / f"{arm}.yaml")
    if isinstance(own, dict):
        return own
    for path in sorted(directory.rglob(f"{ARMS_DIR}/{arm}/{CONFIG_YAML}")):
        spec = (_yaml(path) or {}).get("speculative")
        if isinstance(spec, dict):
            return spec
    return {"name": arm}


def launch_overrides(directory: Path) -> list[str]:
    """The run's command-line overrides (Hydra's .hydra/overrides.yaml, of the run or of the
    validate run above a bench stage) that describe the launch."""
    for where in (directory, directory.parent):
        found = _yaml(where / ".hydra" / "overrides.yaml")
        if isinstance(found, list):
            return [str(o) for o in found
                    if not str(o).lstrip("~").startswith(_NOT_LAUNCH)]
    return []


def _preflight(command: str) -> dict[str, Any]:
    """Run the proposed `dspark serve ... --dry-run --validate` as a person would paste it."""
    argv = [sys.executable, "-m", "dspark_cli.cli", *shlex.split(command)[1:]]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PREFLIGHT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"command": command, "exit": None, "passed": False,
                "output": f"timed out after {PREFLIGHT_TIMEOUT_S:.0f} s"}
    tail = (done.stdout + done.stderr).strip().splitlines()[-6:]
    return {"command": command, "exit": done.returncode, "passed": done.returncode == 0,
            "output": "\n".join(tail)}


def write_proposal(summary: Summary, directory: Path) -> Path:
    """proposal.json (and the proposed profile) for `summary`, its commands preflighted."""
    found = proposal.propose(summary.winners, {a: _profile(directory, a) for a in summary.arms},
                             has_field(proposal.SCHEDULE_KEY), launch_overrides(directory),
                             directory, summary.arms)
    path = proposal.write(found, directory)
    if found.commands:
        data = json.loads(path.read_text())
        data["preflight"] = [_preflight(c) for c in found.commands]
        path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def read(directory: Path) -> dict[str, Any] | None:
    """A run's proposal.json, None when absent or not a JSON object."""
    try:
        data = json.loads((directory / proposal.PROPOSAL_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
