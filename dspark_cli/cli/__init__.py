"""`dspark <command> [hydra overrides] [--flags]`: the command line and the Hydra glue.

Hydra has no subcommands, so `main` takes the command name off the command line and hands the
rest to the steps that lead to the command's run (pipeline.py): dspark's own flags parsed, the
overrides checked, the command's `@hydra.main` app (keeping `--cfg job`, `--help`, `-m` and
shell completion). Errors become exit codes in one place (exit_codes.py).
"""

from __future__ import annotations

import difflib
import sys

from dspark_cli import __version__
from dspark_cli.cli.exit_codes import err
from dspark_cli.cli.help import COMPLETION
from dspark_cli.cli.registry import COMMANDS, top_help
from dspark_cli.errors import ExitCode


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["help"] and argv[1:]:  # `dspark help serve` is `dspark serve --help`
        argv = [argv[1], "--help"]
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(top_help(), end="")
        return 0 if argv else int(ExitCode.USAGE)
    if argv[0] in ("-V", "--version"):
        print(f"dspark {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        if COMPLETION & set(argv):  # completing the command word itself
            print(" ".join(COMMANDS))
            return 0
        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f" Did you mean `dspark {close[0]}`?" if close else ""
        err(f"unknown command {name!r}.{hint} Commands: {', '.join(COMMANDS)}.")
        return int(ExitCode.USAGE)
    # A command runs: the steps to it, which `dspark --help` never loads.
    from dspark_cli.cli.pipeline import run_command

    return run_command(name, rest)


def entry() -> None:
    sys.exit(main())
