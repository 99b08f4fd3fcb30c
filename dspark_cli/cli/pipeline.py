"""The steps from `dspark <command> ...` to the command's run, in order (`prepare_and_run`):
each a named function, so the order is read in one place and every step tested on its own."""

from __future__ import annotations

import argparse
import re
import sys
from functools import partial
from typing import Any

from dspark_cli.cli.args import bare_words, flag_parser, refuse_leftovers, split_hydra_args
from dspark_cli.cli.command import Command
from dspark_cli.cli.exit_codes import err, exit_code_for
from dspark_cli.cli.help import COMPLETION, command_help
from dspark_cli.cli.hydra_app import (
    SWEEP,
    complete,
    hydra_settings,
    planned_run_dir,
    redact_hydra_files,
    run_hydra_app,
    scratch_sweep,
    split_run_dir,
)
from dspark_cli.cli.overrides import check_syntax, expand_home
from dspark_cli.cli.registry import COMMANDS, command_of
from dspark_cli.console import set_verbose
from dspark_cli.errors import UsageError
from dspark_cli.launch.secrets import hide, learn, learn_reads, scrubbed_output, secret_reads
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
    # 5. The rest: overrides and Hydra's flags (a flag neither knows is refused).
    overrides, flags = split_hydra_args(name, rest, parser)
    # 6. The overrides made into what Hydra reads: `~` expanded, the hardware given or
    #    detected, secrets turned into references.
    overrides = expand_home(overrides)
    overrides = with_hardware(overrides, detect=command.detects_hardware(opts))
    overrides = hide_secrets(overrides, flags)
    # 7. The overrides checked before Hydra composes: keys the schema lacks, then syntax.
    check_keys(overrides)
    check_syntax([*overrides, *bare_words(flags)])
    # 8. A dry run runs in `.`: where its run would write is planned, not made.
    dry_run = bool(getattr(opts, "dry_run", False))
    run_dir = None
    if dry_run:
        overrides, run_dir = split_run_dir(overrides)
    # 9. The command's schema stored, and its Hydra app run: the job runs the command on the
    #    composed config (`composed_run`).
    command.store_schema()
    task = partial(composed_run, command, opts, run_dir)
    with scratch_sweep(dry_run and bool(SWEEP & set(flags))) as sweep:
        # Overrides first (dspark's settings, then the user's, which win), flags last: a flag
        # with an optional value (`--info`) must not take an override for its value.
        return run_hydra_app(f"dspark {name}", command.config, task,
                             [*hydra_settings(name, opts), *sweep, *overrides, *flags])


_HW_OVERRIDE = re.compile(r"^(\+{0,2})hw=")


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
        # Lazy: only a run without +hw reads the profiles (a dry run with +hw never does).
        from dspark_cli.machine.profiles import detection

        profile, why = detection()
        err(f"hardware: no +hw given; detected +hw={profile} ({why})")
        out.append(f"+hw={profile}")
    return out


def hide_secrets(overrides: list[str], flags: list[str]) -> list[str]:
    """Secrets out of the overrides before Hydra writes them (launch/secrets.py)."""
    overrides, hidden = hide(overrides)
    hidden = hidden or any(secret_reads(o) for o in overrides)
    if hidden and "--resolve" in flags:
        raise UsageError("--resolve would print the secrets these overrides carry; leave it out "
                         "(the config shows them as ${oc.env:...} references).")
    return overrides


def check_keys(overrides: list[str]) -> None:
    """A dotted key the launch schema lacks, refused with the setting meant."""
    # Lazy: the schema it reads imports omegaconf, which a command composing nothing never loads.
    from dspark_cli.cli.override_keys import check_override_keys

    check_override_keys(overrides)


def composed_run(command: Command, opts: argparse.Namespace, run_dir: str | None,
                 cfg: Any) -> int:
    """Hydra's job: the composed config's secrets learnt (and scrubbed from Hydra's files),
    its keys and ranges checked, made the schema's dataclasses, and the command run on them.
    An error is its exit code here: Hydra would print it and exit 1, as if a check had failed."""
    # Lazy: omegaconf and what reads it, loaded once a config is composed.
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError

    from dspark_cli.cli.mistakes import unresolved
    from dspark_cli.config.strict import check_known_keys, check_ranges
    from dspark_cli.config.typed import to_typed, values_of

    try:
        if getattr(opts, "dry_run", False):
            opts.planned_run_dir = planned_run_dir(run_dir)
        learn_reads(OmegaConf.to_container(cfg, resolve=False))
        learn(values_of(cfg))  # its secrets are scrubbed from everything printed from here on
        redact_hydra_files(cfg)
        check_known_keys(cfg)
        check_ranges(cfg)
        # The edge: below here a config is the schema's dataclasses, not OmegaConf.
        return command.run(to_typed(cfg), opts)
    except InterpolationResolutionError as e:  # `${oc.env:UNSET}`, `${no.such.key}`
        return exit_code_for(unresolved(e), opts.debug)
    except Exception as e:
        return exit_code_for(e, opts.debug)

