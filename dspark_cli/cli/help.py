"""`dspark <command> --help`: one screen that teaches the command. Usage, examples (its
contract's: cli/command.py; the seed's job first), the command's own flags (its argparse
parser), the config groups it composes with one line per option (read from conf/:
config/catalog.py), and where to read more. Hydra's dump of the whole composed config stays
behind `--cfg job`.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import TYPE_CHECKING

from dspark_cli.config import catalog
from dspark_cli.errors import exit_codes_help

if TYPE_CHECKING:
    from dspark_cli.cli.command import Command

# Hydra's flags dspark's help names (every one of Hydra's still works; completion offers these).
HYDRA_FLAGS = ("--cfg", "--resolve", "--info", "--multirun", "--hydra-help")
# Hydra's shell-completion flag: with it, a command line is being completed, not run.
COMPLETION = {"-sc", "--shell-completion"}
HELP_WIDTH = 100
_EXAMPLE_WIDTH = 58  # an example's comment starts here, unless the command is longer


def examples(lines: Iterable[tuple[str, str]]) -> list[str]:
    """`  command   # why`, the comments aligned (a longer command keeps its comment close)."""
    rows = list(lines)
    width = max((len(c) for c, _ in rows if len(c) < _EXAMPLE_WIDTH), default=0) + 2
    return [f"  {cmd:<{width}}# {why}" if len(cmd) < width else f"  {cmd}  # {why}"
            for cmd, why in rows]


def _option_lines(group: str, how: str) -> list[str]:
    """The group's header and one line per option; options that say the same (aliases such as
    the bench protocol named after each GPU profile) share a line."""
    merged: dict[str, list[str]] = {}
    for option in catalog.options(group):
        merged.setdefault(option.help, []).append(option.name)
    rows = [("|".join(names), text) for text, names in merged.items()]
    if len(rows) == 1:
        (names, text), = rows
        return [f"  {how.replace('NAME', names)}  {text}"]
    width = max(len(n) for n, _ in rows) + 2
    return [f"  {how}:"] + [f"    {n:<{width}}{t}" for n, t in rows]


def groups(config: str, plans_launch: bool, only: tuple[str, ...] | None) -> list[str]:
    """The config groups section: hw first where the command plans a launch, then the groups
    the command's config composes (or the `only` ones it reads)."""
    names = list(only) if only is not None else catalog.groups_of(config)
    lines = ["config groups (+hw picks its model, speculative, compilation, serving; KEY=VALUE "
             "sets any key):"]
    if plans_launch:
        lines += _option_lines("hw", "+hw=NAME (left out: detected on this machine)")
        lines += _option_lines("image", "+image=NAME")
    for name in names:
        if len(catalog.options(name)) > 1:  # a group of one option is no choice to make
            lines += _option_lines(name, f"{name}=NAME")
    return lines


def _formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's layout, the description and epilog kept as written, at up to 100 columns."""
    return argparse.RawDescriptionHelpFormatter(prog, width=HELP_WIDTH)


def command_help(command: Command, summary: str, parser: argparse.ArgumentParser) -> str:
    """The whole help text of `dspark <command>` (`summary`: its line in `dspark --help`):
    argparse lays out the usage and the flags, between the examples and the groups."""
    name = command.name
    parser.description = "\n".join([summary[:1].upper() + summary[1:] + ".", "examples:",
                                     *examples(command.examples)])
    epilog = []
    more = f"More: docs/{name}.md"
    if command.config is not None:
        opts, _ = parser.parse_known_args([])
        plans_launch = command.detects_hardware(opts)
        epilog += [*groups(command.config, plans_launch, command.groups), ""]
        parser.usage = f"dspark {name} [GROUP=NAME ...] [KEY=VALUE ...] [flags]"
        more += ", docs/configuration.md; `--cfg job` prints the whole composed config"
    epilog += [more + ".", exit_codes_help()]
    parser.epilog = "\n".join(epilog)
    parser.formatter_class = _formatter
    return parser.format_help()
