"""The proposal of a bench run directory on disk, recomputed from its summary's winners each
time, its inputs from dspark's own config only: the arms' profiles from the config group (and,
in a live bench, `bench.profiles` of this process's config), the launch overrides of this
process's own command line. Nothing read back from a run (its `.hydra/overrides.yaml`, its
arms' config.yaml, a proposal.json) is ever used as an override or a profile. Only a live bench
puts each proposed `dspark serve` command through the dry-run preflight (`--dry-run
--validate`, vLLM's own parser included), from its own config; `bench --report` and `dspark
report` run nothing and say the preflight was not checked. There an arm from outside the config
group (a validated proposal) is served, as the validate command does, from the run's own
`proposal/` folder, where the bench carried its profile: named in the command, not read."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.bench import proposal
from dspark_cli.bench.protocol import split_variant
from dspark_cli.bench.summary import Summary
from dspark_cli.console import json_text
from dspark_cli.errors import UsageError
from dspark_cli.paths import PROPOSAL_DIR, conf_dir
from dspark_cli.untrusted import load_json, load_yaml, write_atomic
from dspark_cli.vllm.options import has_field

if TYPE_CHECKING:
    from dspark_cli.config.bench import BenchPrimary

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # a config group option's name

# Overrides of the run that are not the launch a proposal keeps: the protocol, the run's own
# directory and ports, and the drafter the proposal replaces.
_NOT_LAUNCH = ("bench", "+bench", "hydra", "validate", "+validate", "speculative", "server.")
PREFLIGHT_TIMEOUT_S = 300.0
NOT_CHECKED = ("not checked: the preflight runs only in the bench that measured the cells, "
               "from its own config; run the command to check it")


@dataclass(frozen=True)
class Launch:
    """What this process's own config says of the launch (never read back from a run)."""

    overrides: tuple[str, ...]  # its command line's overrides that describe the launch
    profiles_dir: Path | None  # `bench.profiles`: arms from outside the config group


def this_launch(cfg: BenchPrimary) -> Launch:
    """The launch of the running `dspark bench`/`validate`, from Hydra's own record of this
    process's command line."""
    from hydra.core.hydra_config import HydraConfig

    given = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    extra = cfg.bench.profiles
    return Launch(tuple(o for o in given if not o.lstrip("~").startswith(_NOT_LAUNCH)),
                  Path(str(extra)).expanduser().resolve() if extra else None)


def _yaml(path: Path, root: Path) -> Any:
    """A YAML file inside `root` through the one reader; None when absent or unreadable (a
    proposal is advice: a bad record leaves the arm's profile unknown, not the run)."""
    try:
        return load_yaml(path, root)
    except UsageError:
        return None


def own_profiles(arms: list[str] | tuple[str, ...], launch: Launch | None
                 ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(every profile, those from outside the config group) of `arms` as dspark's own config
    holds them: conf/speculative/, else this process's `bench.profiles`. An arm named by a
    record is only ever looked up by name among these files."""
    group = {p.stem: p for p in (conf_dir() / "speculative").glob("*.yaml")}
    extra = ({p.stem: p for p in (launch.profiles_dir / "speculative").glob("*.yaml")}
             if launch and launch.profiles_dir else {})
    found, foreign = {}, {}
    for arm in arms:
        path = group.get(arm) or extra.get(arm)
        profile = _yaml(path, path.parent) if path else None
        if isinstance(profile, dict):
            found[arm] = profile
            if arm not in group:
                foreign[arm] = profile
    return found, foreign


def _arms(summary: Summary) -> list[str]:
    """The config options the summary's arms are (a variant `<arm>+pc-off` is its arm's)."""
    return list(dict.fromkeys(split_variant(v)[0] for v in summary.arms))


def carried(arms: list[str], directory: Path) -> list[str]:
    """Those of `arms` whose profile the bench that measured `directory` carried into its
    `proposal/speculative/` (arms from outside the config group, `bench.profiles`): a readable
    YAML map there. Only named, never read as a profile: a command that serves one puts that
    folder on Hydra's search path, as the proposal's validate command does."""
    folder = directory / PROPOSAL_DIR / "speculative"
    return [a for a in arms if _NAME.fullmatch(a)
            and isinstance(_yaml(folder / f"{a}.yaml", directory), dict)]


def recompute(summary: Summary, directory: Path, launch: Launch | None) -> proposal.Proposal:
    """The proposal `summary`'s winners make (pure but for reading dspark's own profiles and
    the installed vLLM's source); each variant's profile is its arm's. Without `launch` (a
    report of the run), an arm from outside the config group is served from the run's own
    `proposal/` folder when the bench carried its profile there (`carried`)."""
    found, foreign = own_profiles(_arms(summary), launch)
    profiles = {v: found[a] for v in summary.arms if (a := split_variant(v)[0]) in found}
    outside = list(foreign) if launch is not None else carried(
        [a for a in _arms(summary) if a not in found], directory)
    return proposal.propose(
        summary.winners, profiles, has_field(proposal.SCHEDULE_KEY),
        launch.overrides if launch else (), directory, summary.arms,
        {a: directory / PROPOSAL_DIR for a in outside}, launch_known=launch is not None)


def _checked(stdout: str) -> bool:
    """The plan `--json` printed, with vLLM's own verdict on the command among its findings
    passed: an exit 0 that checked nothing (a help text, a printed config) is no pass."""
    try:
        plan = json.loads(stdout)
    except ValueError:
        return False
    found = plan.get("preflight") if isinstance(plan, dict) else None
    return isinstance(found, list) and any(
        isinstance(f, dict) and f.get("rule") == "vllm-accepts-command"
        and f.get("status") == "passed" for f in found)


def _preflight(command: str) -> dict[str, Any]:
    """Run the proposed `dspark serve ... --dry-run --validate` as a person would paste it
    (machine-readable: `--json`, the same run)."""
    argv = [sys.executable, "-m", "dspark_cli.cli", *shlex.split(command)[1:], "--json"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PREFLIGHT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"command": command, "exit": None, "passed": False,
                "output": f"timed out after {PREFLIGHT_TIMEOUT_S:.0f} s"}
    tail = done.stderr.strip().splitlines()[-6:]
    return {"command": command, "exit": done.returncode,
            "passed": done.returncode == 0 and _checked(done.stdout), "output": "\n".join(tail)}


def write_proposal(summary: Summary, directory: Path, launch: Launch | None = None) -> Path:
    """proposal.json (and the profiles a validation of it needs) for `summary`; with `launch`
    (a live bench: this process's own config), its commands preflighted, else none is."""
    found = recompute(summary, directory, launch)
    _, foreign = own_profiles(_arms(summary), launch)
    path = proposal.write(found, directory, foreign)
    if found.commands:
        data = found.to_dict()
        data["preflight"] = ([_preflight(c) for c in found.commands] if launch is not None
                             else NOT_CHECKED)
        write_atomic(path, json_text(data), directory)
    return path


def read(directory: Path) -> dict[str, Any] | None:
    """A run's proposal.json through the one reader, None when absent or not a JSON object;
    RecordError (exit 2) when it is unreadable (a FIFO, a link out, bad bytes)."""
    data = load_json(directory / proposal.PROPOSAL_JSON, directory)
    return data if isinstance(data, dict) else None
