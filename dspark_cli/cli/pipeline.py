"""The steps from `dspark <command> ...` to the command's run, in order (`prepare_and_run`),
each a named function. The steps Hydra takes part in (shell completion, composing the command's
config) are in compose.py, loaded only when a command gets there: `dspark <command> --help` and
the commands that compose nothing (`report`, `compare`, `prepare`) never import Hydra."""

from __future__ import annotations

import sys

from dspark_cli.cli.args import flag_parser, refuse_leftovers
from dspark_cli.cli.exit_codes import exit_code_for
from dspark_cli.cli.help import COMPLETION, command_help
from dspark_cli.cli.registry import COMMANDS, command_of
from dspark_cli.console import set_verbose
from dspark_cli.launch.secrets import scrubbed_output
from dspark_cli.machine.detect import forget


def run_command(name: str, argv: list[str]) -> int:
    """`dspark <name> argv...`: the machine probed afresh (once per command), every line
    printed through the secret filter, and every error turned into its exit code."""
    forget()
    with scrubbed_output():  # no secret is ever printed, whoever prints
        try:
            code = prepare_and_run(name, argv)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's final flush
            return code
        except (Exception, KeyboardInterrupt) as e:
            return exit_code_for(e, "--debug" in argv)


def prepare_and_run(name: str, argv: list[str]) -> int:
    """The steps before the command runs; the command's exit code."""
    # 1. The command's contract, and the parser of its own flags.
    command = command_of(name)
    parser = flag_parser(name, command.add_arguments)
    # 2. Shell completion and help answer before anything is read.
    if COMPLETION & set(argv):
        from dspark_cli.cli.compose import complete  # Hydra's completion

        return complete(command, parser, argv)
    if {"-h", "--help"} & set(argv):
        print(command_help(command, COMMANDS[name].help, parser), end="")
        return 0
    # 3. dspark's own flags off the line.
    opts, rest = parser.parse_known_args(argv)
    set_verbose(getattr(opts, "verbose", False))
    # 4. A command that composes no config (`report`) runs now: no Hydra at all.
    if command.config is None:
        refuse_leftovers(name, rest, parser)
        return command.run(None, opts)
    # 5-10. The rest is Hydra's: the overrides checked, the config composed, the command run
    #       on it (compose.py).
    from dspark_cli.cli.compose import compose_and_run

    return compose_and_run(command, opts, rest, parser)
