"""The commands `dspark` knows: each one's module (whose `COMMAND` is its contract:
cli/command.py), imported only when that command runs, and the one-line summary `dspark --help`
lists, so that listing the commands imports none of them."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dspark_cli.errors import exit_codes_help

if TYPE_CHECKING:
    from dspark_cli.cli.command import Command


@dataclass(frozen=True)
class Listed:
    """A command as `dspark --help` lists it: its module and its one-line summary."""

    module: str
    help: str


COMMANDS: dict[str, Listed] = {
    "serve": Listed("dspark_cli.commands.serve",
                    "compose, check and launch vLLM with DSpark (--dry-run prints it)"),
    "verify-checkpoint": Listed("dspark_cli.commands.verify_checkpoint",
                                "verify a checkpoint: integrity, pins, hashes, confidence head"),
    "smoke": Listed("dspark_cli.commands.smoke",
                    "boot the planned server, check it live, give a verdict"),
    "bench": Listed("dspark_cli.commands.bench",
                    "run a benchmark protocol over arms x concurrencies"),
    "validate": Listed("dspark_cli.commands.validate",
                       "checkpoint, focused tests, smoke, bench and the report, in one run"),
    "report": Listed("dspark_cli.commands.report",
                     "render the validation report from existing run directories"),
    "compare": Listed("dspark_cli.commands.compare",
                      "what changed between two runs, and which cells got slower"),
    "prepare": Listed("dspark_cli.commands.prepare",
                      "turn SPEED-Bench's release into the pinned request file a bench reads"),
    "env": Listed("dspark_cli.commands.env",
                  "this host as dspark sees it: GPUs, profile, vLLM, torch, pins, refusals"),
}


def command_of(name: str) -> Command:
    """The contract of `dspark <name>`, its module imported now."""
    command: Command = importlib.import_module(COMMANDS[name].module).COMMAND
    return command


def top_help() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {c.help}" for name, c in COMMANDS.items()]
    return (
        "usage: dspark <command> [hydra overrides ...] [--flags]\n\n"
        "DSpark speculative decoding on vLLM: from checkpoint to verified, benchmarked "
        "serving.\n\ncommands:\n" + "\n".join(lines) + "\n\n"
        "`dspark <command> --help` (or `dspark help <command>`) shows its examples, flags, "
        "config groups\nand options. `dspark -V` prints the version.\n"
        + exit_codes_help() + "\n"
    )
