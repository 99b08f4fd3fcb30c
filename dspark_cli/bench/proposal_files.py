"""The proposal of a bench run directory on disk: its inputs read from the run (the arms'
profiles, the run's own launch overrides, what the installed vLLM has), proposal.json written,
and every proposed `dspark serve` command put through the same dry-run preflight
(`--dry-run --validate`, vLLM's own parser included), its outcome recorded beside it."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from dspark_cli.bench import proposal
from dspark_cli.bench.summary import Summary
from dspark_cli.errors import UsageError
from dspark_cli.paths import conf_dir
from dspark_cli.run_files import ARMS_DIR, CONFIG_YAML
from dspark_cli.untrusted import load_json, load_yaml, walk, write_atomic
from dspark_cli.vllm.speculative_fields import has_field

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # a config group option's name

# Overrides of the run that are not the launch a proposal keeps: the protocol, the run's own
# directory and ports, and the drafter the proposal replaces.
_NOT_LAUNCH = ("bench", "+bench", "hydra", "validate", "+validate", "speculative", "server.")
PREFLIGHT_TIMEOUT_S = 300.0


def _yaml(path: Path, root: Path) -> Any:
    """A YAML file inside `root` through the one reader; None when absent or unreadable (a
    proposal is advice: a bad record leaves the arm's profile unknown, not the run)."""
    try:
        return load_yaml(path, root)
    except UsageError:
        return None


def _profile(directory: Path, arm: str) -> dict[str, Any]:
    """The arm's profile as the config group holds it, else as its run record resolved it.
    `arm` comes from the records: a name that is no plain file name names no profile."""
    if not _NAME.fullmatch(arm):
        return {"name": arm}
    own = _yaml(conf_dir() / "speculative" / f"{arm}.yaml", conf_dir())
    if isinstance(own, dict):
        return own
    for path in walk(directory, [CONFIG_YAML])[CONFIG_YAML]:
        if path.parent.name != arm or path.parent.parent.name != ARMS_DIR:
            continue
        spec = _yaml(path, directory)
        spec = spec.get("speculative") if isinstance(spec, dict) else None
        if isinstance(spec, dict):
            return spec
    return {"name": arm}


def launch_overrides(directory: Path) -> list[str]:
    """The run's command-line overrides (Hydra's .hydra/overrides.yaml, of the run or of the
    validate run above a bench stage) that describe the launch."""
    for where in (directory, directory.parent):
        found = _yaml(where / ".hydra" / "overrides.yaml", where)
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
        data = found.to_dict()
        data["preflight"] = [_preflight(c) for c in found.commands]
        write_atomic(path, json.dumps(data, indent=2) + "\n", directory)
    return path


def read(directory: Path) -> dict[str, Any] | None:
    """A run's proposal.json through the one reader, None when absent or not a JSON object;
    RecordError (exit 2) when it is unreadable (a FIFO, a link out, bad bytes)."""
    data = load_json(directory / proposal.PROPOSAL_JSON, directory)
    return data if isinstance(data, dict) else None
