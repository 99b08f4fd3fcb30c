"""`dspark <command> [hydra overrides] [--flags]`: one Hydra app per command.

Hydra has no subcommands, so this dispatcher takes the command name and dspark's own flags off
the command line and hands the rest to the command's `@hydra.main` app (keeping `--cfg job`,
`--help`, `-m` and shell completion). Errors are mapped to exit codes here and only here.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dspark_cli import __version__
from dspark_cli.command_help import HYDRA_FLAGS, command_help
from dspark_cli.commands.hydra_app import (
    COMPLETION,
    SWEEP,
    hydra_settings,
    planned_run_dir,
    redact_hydra_files,
    run_hydra_app,
    scratch_sweep,
    shell_completion,
    split_run_dir,
)
from dspark_cli.console import set_verbose
from dspark_cli.errors import (
    EXTRAS,
    DsparkError,
    ExitCode,
    MissingEngine,
    MissingExtra,
    UsageError,
    exit_codes_help,
)

if TYPE_CHECKING:
    from dspark_cli.commands.command import Command


@dataclass(frozen=True)
class Listed:
    """A command as `dspark --help` lists it: the module whose `COMMAND` is its contract
    (commands/command.py), imported only when the command runs, and its one-line summary."""

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


_HW_OVERRIDE = re.compile(r"^(\+{0,2})hw=")


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


def err(message: str) -> None:
    print(f"dspark: {message}", file=sys.stderr)


def with_hardware(overrides: list[str], detect: bool) -> list[str]:
    """`hw=X` means `+hw=X` (hw is not in the defaults list); no hw at all means detect it,
    for commands that plan a launch on this machine (`detect`)."""
    out, has_hw = [], False
    for item in overrides:
        match = _HW_OVERRIDE.match(item)
        if match:
            has_hw = True
            if not match.group(1):
                item = "+" + item
        out.append(item)
    if detect and not has_hw:
        from dspark_cli.machine.profiles import detection

        profile, why = detection()
        err(f"hardware: no +hw given; detected +hw={profile} ({why})")
        out.append(f"+hw={profile}")
    return out


def _parser(name: str, add_arguments: Callable[[argparse.ArgumentParser], None]) -> Any:
    parser = argparse.ArgumentParser(prog=f"dspark {name}", add_help=False, allow_abbrev=False)
    parser.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    parser.add_argument("--debug", action="store_true",
                        help="show Python tracebacks for errors")
    add_arguments(parser)
    return parser


def own_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The long flags of a command's parser (`--dry-run`, `--json`, ...)."""
    return [s for a in parser._actions for s in a.option_strings if s.startswith("--")]


def hydra_flags() -> set[str]:
    """Every option string Hydra's own command line accepts (`--cfg`, `-m`, `-sc`, ...)."""
    from hydra._internal.utils import get_args_parser

    return {s for action in get_args_parser()._actions for s in action.option_strings}


def unknown_flag(name: str, words: list[str], at: int, known: list[str],
                 composes: bool = True) -> UsageError:
    """The refusal of `words[at]`, a flag `dspark <name>` lacks: the close flag it has, else
    (for a command that `composes` a config) the override that sets the `vllm serve` option of
    that name (`--max-num-seqs 512` -> `serving.args.max_num_seqs=512`)."""
    import difflib

    flag, eq, value = words[at].partition("=")
    following = words[at + 1] if at + 1 < len(words) else None
    if not eq and following and not following.startswith("-") and "=" not in following:
        value = following
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
    if close:
        return UsageError(f"unknown flag {flag!r} for `dspark {name}`; did you mean "
                          f"{close[0]}? `dspark {name} --help` lists its flags.")
    from dspark_cli.launch.vllm_options import override_for

    setting = override_for(flag, value or None) if composes else None
    if setting:
        return UsageError(f"{flag!r} is a `vllm serve` flag, not one of `dspark {name}`'s: "
                          f"dspark sets vLLM's options through its config; write {setting} "
                          "instead (docs/configuration.md).")
    return UsageError(f"unknown flag {flag!r} for `dspark {name}`; `dspark {name} --help` "
                      "lists its flags.")


def split_hydra_args(name: str, rest: list[str],
                     parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """(overrides, Hydra flags with their values), refusing a flag Hydra does not know."""
    plain = [o for o in rest if not o.startswith("-") and ("=" in o or o[:1] in "+~")]
    flags = [o for o in rest if o not in plain]
    if any(o.startswith("-") for o in flags):
        known = hydra_flags()
        for at, word in enumerate(rest):
            if word.startswith("-") and word.split("=")[0] not in known:
                raise unknown_flag(name, rest, at, [*own_flags(parser), *HYDRA_FLAGS])
        _check_hydra_flags(name, flags)
    return plain, flags


def _check_hydra_flags(name: str, flags: list[str]) -> None:
    """Hydra's flags read by Hydra's own parser, a mistake said in one line (`--cfg` without
    its value) rather than as Hydra's usage block."""
    from hydra._internal.utils import get_args_parser

    hydra = get_args_parser()
    hydra.exit_on_error = False
    try:
        hydra.parse_args(flags)
    except argparse.ArgumentError as e:
        raise UsageError(f"{e}; `dspark {name} --help` lists the flags.") from None


def run_plain(command: Command, opts: argparse.Namespace, rest: list[str],
              parser: argparse.ArgumentParser) -> int:
    """A command without config: its own flags only."""
    name = command.name
    if rest:
        if rest[0].startswith("-"):
            raise unknown_flag(name, rest, 0, own_flags(parser), composes=False)
        raise UsageError(f"unexpected argument {rest[0]!r} for `dspark {name}`; "
                         f"`dspark {name} --help` says what it takes.")
    return command.run_with(None, opts)


def complete(command: Command, parser: argparse.ArgumentParser, argv: list[str]) -> int:
    """Shell completion: a flag being typed (or any word of a command without config) gets the
    command's own flags; the rest is Hydra's completion of groups, options and keys. Nothing
    goes to stderr, which the shell would print onto the command line."""
    words = [a for a in argv if a in COMPLETION
             or a.partition("=")[0] in ("query", "install", "uninstall")]
    plain = [w for w in words if "=" in w]
    name = command.name
    if len(plain) != 1:
        raise UsageError(f"`-sc` (--shell-completion) takes one of install=SHELL, "
                         f"uninstall=SHELL or query=SHELL (SHELL: bash, zsh or fish); "
                         f'`eval "$(dspark {name} -sc install=bash)"` installs it.')
    if plain[0].startswith("query=") and "COMP_LINE" not in os.environ:
        raise UsageError("`-sc query=...` is what the installed completion calls, with the "
                         "line being completed in COMP_LINE, which is not set here; "
                         f'`eval "$(dspark {name} -sc install=bash)"` installs the completion.')
    line = os.environ.get("COMP_LINE", "")
    current = "" if line.endswith(" ") else (line.split() or [""])[-1]
    if any(w.startswith("query=") for w in plain) and (command.config is None
                                                       or current.startswith("-")):
        hydra = list(HYDRA_FLAGS) if command.config is not None else []
        print(" ".join([*own_flags(parser), *hydra]))
        return 0
    flags = [w for w in words if w not in plain]
    return shell_completion(command, plain, flags)


def hide_secrets(overrides: list[str], flags: list[str]) -> list[str]:
    """Secrets out of the overrides before Hydra writes them (launch/secrets.py)."""
    from dspark_cli.launch.secrets import hide, secret_reads

    overrides, hidden = hide(overrides)
    hidden = hidden or any(secret_reads(o) for o in overrides)
    if hidden and "--resolve" in flags:
        raise UsageError("--resolve would print the secrets these overrides carry; leave it out "
                         "(the config shows them as ${oc.env:...} references).")
    return overrides


def _bare_words(flags: list[str]) -> list[str]:
    """Words among the Hydra flags that are no flag's value: overrides without `=`, which
    Hydra would refuse with its lexer's dump."""
    from hydra._internal.utils import get_args_parser

    takes_value = {s for a in get_args_parser()._actions if a.nargs != 0
                   for s in a.option_strings}
    words, after_flag = [], False
    for word in flags:
        if not word.startswith("-") and not after_flag:
            words.append(word)
        after_flag = word.split("=")[0] in takes_value and "=" not in word
    return words


def run_command(name: str, argv: list[str]) -> int:
    command = command_of(name)
    parser = _parser(name, command.add_arguments)
    if COMPLETION & set(argv):
        return complete(command, parser, argv)
    if {"-h", "--help"} & set(argv):
        print(command_help(command, COMMANDS[name].help, parser), end="")
        return 0
    opts, rest = parser.parse_known_args(argv)
    set_verbose(getattr(opts, "verbose", False))
    if command.config is None:  # composes no config (`report`): no Hydra at all
        return run_plain(command, opts, rest, parser)
    plain, flags = split_hydra_args(name, rest, parser)
    from dspark_cli.config.overrides import check_syntax, expand_home

    plain = expand_home(plain)
    plain = with_hardware(plain, detect=command.detects_hardware(opts))
    plain = hide_secrets(plain, flags)
    from dspark_cli.config.override_keys import check_override_keys

    check_override_keys(plain)

    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError

    from dspark_cli.config.mistakes import unresolved
    from dspark_cli.config.strict import check_known_keys, check_ranges
    from dspark_cli.config.typed import to_typed, values_of
    from dspark_cli.launch.secrets import learn, learn_reads

    settings = hydra_settings(name, opts)
    dry_run = bool(getattr(opts, "dry_run", False))

    def task(cfg: Any) -> int:
        try:
            if dry_run:
                opts.planned_run_dir = planned_run_dir(run_dir)
            learn_reads(OmegaConf.to_container(cfg, resolve=False))
            learn(values_of(cfg))  # its secrets are scrubbed from everything printed from here on
            redact_hydra_files(cfg)
            check_known_keys(cfg)
            check_ranges(cfg)
            # The edge: below here a config is the schema's dataclasses, not OmegaConf.
            code = command.run_with(to_typed(cfg), opts)
        except InterpolationResolutionError as e:  # `${oc.env:UNSET}`, `${no.such.key}`
            code = exit_code_for(unresolved(e), opts.debug)
        except Exception as e:  # Hydra would print it and exit 1, as if a check had failed
            code = exit_code_for(e, opts.debug)
        return code

    check_syntax([*plain, *_bare_words(flags)])
    run_dir = None
    if dry_run:  # it runs in `.`: where the run would write is planned, not made
        plain, run_dir = split_run_dir(plain)
    command.store_schema()
    with scratch_sweep(dry_run and bool(SWEEP & set(flags))) as sweep:
        # Overrides first (dspark's settings, then the user's, which win), flags last: a flag
        # with an optional value (`--info`) must not take an override for its value.
        return run_hydra_app(f"dspark {name}", command.config, task,
                             [*settings, *sweep, *plain, *flags])


# What `serve`, `smoke` and `bench` import to run vLLM: missing, it is an install to make.
ENGINE = frozenset({"vllm", "torch"})

def exit_code_for(error: BaseException, debug: bool) -> int:
    """The one place an error becomes a message (or silence) and an exit code."""
    if isinstance(error, KeyboardInterrupt):
        err("cancelled.")
        return int(ExitCode.INTERRUPTED)
    if isinstance(error, BrokenPipeError):
        # Nothing more can reach stdout; point it at /dev/null so the final flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(ExitCode.BROKEN_PIPE)
    if debug:
        raise error
    if isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] in ENGINE:
        error = MissingEngine(error.name or "", str(error))
    elif isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] in EXTRAS:
        error = MissingExtra(error.name or "")
    if isinstance(error, DsparkError):
        err(error.message + (f"\n  hint: {error.hint}" if error.hint else ""))
        return int(error.exit_code)
    err(f"unexpected {type(error).__name__}: {error} (rerun with --debug for the traceback)")
    return int(ExitCode.INTERNAL)


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
        import difflib

        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f" Did you mean `dspark {close[0]}`?" if close else ""
        err(f"unknown command {name!r}.{hint} Commands: {', '.join(COMMANDS)}.")
        return int(ExitCode.USAGE)
    from dspark_cli.launch.secrets import scrubbed_output
    from dspark_cli.machine.detect import forget

    forget()  # this command probes the machine afresh (once)
    with scrubbed_output():  # no secret is ever printed, whoever prints
        try:
            code = run_command(name, rest)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's final flush
            return code
        except (Exception, KeyboardInterrupt) as e:
            return exit_code_for(e, "--debug" in rest)


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
