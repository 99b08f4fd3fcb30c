"""The configuration that follows the crossover, proposed from the winners per load (pure but
for `write`). Where the winning arms differ only in their draft count (no speculation counts
as K=0) and the installed vLLM has `num_speculative_tokens_per_batch_size`, one server with a
K per batch-size range; otherwise the arm to launch per load range. Either way a proposal to
validate: between two measured concurrencies the crossover is a guess, and a schedule is a new
configuration no cell has measured.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dspark_cli.bench import winners
from dspark_cli.run_files import PROPOSAL_DIR as PROFILES_DIR
from dspark_cli.run_files import PROPOSAL_JSON
from dspark_cli.untrusted import write_atomic

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
PROPOSED = "proposed"
STATEMENT = ("A proposal to validate, not a measured result: run it as one more arm "
             "(validate_command) before serving it.")
# Settings of a profile that say what it is rather than how it drafts.
_NOT_DRAFTING = ("name", "num_speculative_tokens", "expect_log", "draft_tokens_rule")


@dataclass(frozen=True)
class Proposal:
    kind: str  # "schedule", "per_load" or "none"
    ranges: tuple[tuple[int, int, str], ...]  # (first load, last load, arm), inclusive
    schedule: tuple[tuple[int, int, int], ...] = ()  # vLLM's (start, end, K) when "schedule"
    profile: Mapping[str, Any] | None = None  # the speculative profile a schedule is
    commands: tuple[str, ...] = ()  # `dspark serve ... --dry-run --validate`, shell-quoted
    validate_command: str = ""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "statement": STATEMENT if self.kind != "none" else "",
                "ranges": [{"first": a, "last": b, "arm": arm} for a, b, arm in self.ranges],
                "schedule": [list(s) for s in self.schedule], "profile": self.profile,
                "commands": list(self.commands), "validate_command": self.validate_command,
                "note": self.note}


def _k(profile: Mapping[str, Any]) -> int:
    return int(profile.get("num_speculative_tokens") or 0) if profile.get("method") else 0


def _drafting(profile: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in profile.items() if k not in _NOT_DRAFTING}


def schedulable(arms: Sequence[str], profiles: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The arm whose drafter a K schedule would run (the largest K), or None when the arms
    differ in more than their draft count (or none drafts)."""
    drafting = [a for a in arms if profiles[a].get("method")]
    if not drafting or len({json.dumps(_drafting(profiles[a]), sort_keys=True, default=str)
                            for a in drafting}) != 1:
        return None
    return max(drafting, key=lambda a: _k(profiles[a]))


def _serve(base: Sequence[str], extra: Sequence[str]) -> str:
    return shlex.join(["dspark", "serve", *base, *extra, "--dry-run", "--validate"])


def propose(found: Sequence[winners.Winner], profiles: Mapping[str, Mapping[str, Any]],
            has_schedule: bool, base_overrides: Sequence[str], run_dir: Path,
            arms: Sequence[str]) -> Proposal:
    """What to serve from `found` (the summary's winners); `profiles` are the arms' speculative
    profiles, `base_overrides` the run's own launch overrides (model, hardware, serving)."""
    ranges = tuple(winners.ranges(found))
    if not ranges:
        return Proposal("none", (), note="no load has a clear winner: nothing to propose")
    used = list(dict.fromkeys(arm for _, _, arm in ranges))
    gaps = [w.concurrency for w in found if w.arm is None]
    gap_note = (f"; loads {gaps} have no clear winner: vLLM carries the range below on"
                if gaps else "")
    validate = shlex.join(["dspark", "validate", *base_overrides,
                           f"bench.arms=[{','.join([*arms, PROPOSED])}]",
                           f"bench.profiles={run_dir / PROFILES_DIR}"])
    base = schedulable(used, profiles) if len(used) > 1 else None
    if base is not None and has_schedule:
        schedule = tuple((a, b, _k(profiles[arm])) for a, b, arm in ranges)
        value = "[" + ",".join(f"[{a},{b},{k}]" for a, b, k in schedule) + "]"
        profile = {**profiles[base], "name": PROPOSED,
                   "extra": {**(profiles[base].get("extra") or {}), SCHEDULE_KEY: schedule}}
        cmd = _serve(base_overrides, [f"speculative={base}",
                                      f"+speculative.extra.{SCHEDULE_KEY}={value}"])
        return Proposal("schedule", ranges, schedule, profile, (cmd,), validate,
                        f"one server, K per batch size from {base}'s drafter{gap_note}")
    why = ("one arm wins every load it wins" if len(used) == 1 else
           f"the installed vLLM has no {SCHEDULE_KEY}" if base is not None else
           "the winning arms differ in more than their draft count")
    cmds = tuple(_serve(base_overrides, [f"speculative={arm}"]) for arm in used)
    return Proposal("per_load", ranges, (), None, cmds, "",
                    f"the arm per load range ({why}); route each range to its own server"
                    f"{gap_note}")


def write(proposal: Proposal, directory: Path) -> Path:
    """proposal.json, and the proposed profile as `proposal/speculative/proposed.yaml` (what
    `bench.profiles` makes an arm), each replaced atomically, never through a planted link."""
    if proposal.profile is not None:
        plain = json.loads(json.dumps(proposal.profile, default=list))
        write_atomic(directory / PROFILES_DIR / "speculative" / f"{PROPOSED}.yaml",
                     f"# {STATEMENT}\n" + yaml.safe_dump(plain, sort_keys=False), directory)
    return write_atomic(directory / PROPOSAL_JSON, json.dumps(proposal.to_dict(), indent=2)
                        + "\n", directory)
