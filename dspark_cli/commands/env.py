"""`dspark env`: this host as dspark sees it, against the profile a run would use (detected, or
given with `+hw=` and `+image=`); `--json` for a machine, `--check` to exit 1 when a run here
would be refused.

    dspark env
    dspark env +hw=mi350x +image=seed_mi350x --check
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from dspark_cli.cli.command import Command
from dspark_cli.console import print_json
from dspark_cli.errors import DsparkError, ExitCode
from dspark_cli.hostenv import Choice, collect, option_table, render
from dspark_cli.launch import checks, runtime
from dspark_cli.launch.plan import build_plan
from dspark_cli.machine.detect import Machine, detect, match_profile
from dspark_cli.machine.profiles import detected_profile, profile_patterns
from dspark_cli.status import Finding, Status

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


def _needs_machine(opts: argparse.Namespace) -> bool:
    """Without `+hw`, the profile this machine matches; none matching is reported, not an
    error (no profile is then composed)."""
    try:
        detected_profile()
    except DsparkError:
        return False
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a run here would be refused")
    parser.add_argument("--vllm", action="store_true",
                        help="derive the installed vLLM's option table when no cached one holds "
                        "it (imports vLLM in a subprocess: seconds), so the launch rules run")
    # env starts and writes nothing: composed as a plan is, with no run directory.
    parser.set_defaults(dry_run=True)


def run(cfg: LaunchConf, opts: argparse.Namespace) -> int:
    machine = detect()
    try:
        detected: str | None = match_profile(machine, profile_patterns())
    except LookupError:
        detected = None
    name = cfg.hw.name if cfg.hw is not None else None
    choice = Choice(profile=name, chosen_by="detected" if name == detected else "+hw",
                    method=cfg.speculative.method,
                    adaptive=bool(cfg.speculative.enable_adaptive_verification),
                    pins=runtime.pinned(cfg.runtime.expected), reference=cfg.runtime.reference)
    table, ready = option_table(opts.vllm)
    findings, not_checked = _preflight(cfg, machine, ready, name)
    env = collect(choice, machine, detected, table, findings, not_checked)
    if opts.json:
        print_json(env.to_dict())
    else:
        sys.stdout.write(render(env))
    return int(ExitCode.CHECK_FAILED if opts.check and env.refused else ExitCode.OK)


def _preflight(cfg: LaunchConf, machine: Machine, ready: bool,
               profile: str | None) -> tuple[list[Finding], list[str]]:
    """The preflight a real run does on this machine (no vLLM verdict), when the option table is
    at hand; else only the runtime pins, and a line saying what was not checked."""
    pins = runtime.finding(cfg.runtime.expected, dry_run=False,
                           reference=cfg.runtime.reference)
    if profile is None:
        return [pins], ["the launch rules: no hardware profile matches this machine (+hw=...)"]
    if not ready:
        return [pins], ["the launch rules and the checkpoint: they need the installed vLLM's "
                        "option table (`dspark env --vllm`)"]
    try:
        return list(checks.check(cfg, build_plan(cfg), machine)), []
    except DsparkError as e:
        return [pins, Finding("launch-plan", Status.failed, e.message, None)], []


COMMAND = Command(
    name="env",
    examples=(
        ("dspark env", "this host: GPUs, profile, vLLM, torch, AITER"),
        ("dspark env +hw=mi350x --check", "exit 1 if a seed run here would be refused"),
        ("dspark env +hw=mi350x +image=seed_mi350x", "against the report's image pins"),
        ("dspark env --json", "the same facts for a machine"),
    ),
    config="serve",
    add_arguments=add_arguments,
    run=run,
    needs_machine=_needs_machine,
)
