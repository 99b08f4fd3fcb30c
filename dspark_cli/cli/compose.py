"""The steps of `dspark <command>` that Hydra takes part in (`compose_and_run`, after
pipeline.py's first four): the overrides made into what Hydra reads and checked before it
composes, the command's schema stored, its `@hydra.main` app run, and in Hydra's job the
composed config checked and turned into the schema's dataclasses, the command run on them.
Shell completion is Hydra's too (`complete`)."""

from __future__ import annotations

import argparse
import os
import re
from functools import partial
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import InterpolationResolutionError

from dspark_cli.cli.args import bare_words, own_flags, split_hydra_args
from dspark_cli.cli.command import Command
from dspark_cli.cli.exit_codes import err, exit_code_for
from dspark_cli.cli.help import COMPLETION, HYDRA_FLAGS
from dspark_cli.cli.hydra_app import (
    SWEEP,
    hydra_settings,
    planned_run_dir,
    redact_hydra_files,
    run_hydra_app,
    scratch_sweep,
    shell_completion,
    split_run_dir,
)
from dspark_cli.cli.mistakes import unresolved
from dspark_cli.cli.override_keys import check_override_keys
from dspark_cli.cli.overrides import check_syntax, expand_home
from dspark_cli.config.schema import register as register_launch_schema
from dspark_cli.config.strict import check_known_keys, check_ranges
from dspark_cli.config.typed import to_typed, values_of
from dspark_cli.errors import UsageError
from dspark_cli.launch.secrets import hide, learn, learn_reads, secret_reads
from dspark_cli.machine.profiles import detection
from dspark_cli.untrusted import printable


def compose_and_run(command: Command, opts: argparse.Namespace, rest: list[str],
                    parser: argparse.ArgumentParser) -> int:
    """Steps 5 to 10 of a command that composes a config; its exit code."""
    name, config = command.name, command.config
    assert config is not None  # pipeline.py ran a command that composes nothing (step 4)
    # 5. The rest of the line: overrides and Hydra's flags (a flag neither knows is refused).
    overrides, flags = split_hydra_args(name, rest, parser)
    # 6. The overrides made into what Hydra reads: `~` expanded, the hardware given or
    #    detected, secrets turned into references.
    overrides = expand_home(overrides)
    overrides = with_hardware(overrides, detect=command.detects_hardware(opts))
    overrides = hide_secrets(overrides, flags)
    # 7. The overrides checked before Hydra composes: keys the schema lacks, then syntax.
    check_override_keys(overrides)
    check_syntax([*overrides, *bare_words(flags)])
    # 8. A dry run runs in `.`: where its run would write is planned, not made.
    dry_run = bool(getattr(opts, "dry_run", False))
    run_dir = None
    if dry_run:
        overrides, run_dir = split_run_dir(overrides)
    # 9. The command's schema stored in Hydra's ConfigStore.
    store_schema(command)
    # 10. Its Hydra app run: the job runs the command on the composed config (`composed_run`).
    task = partial(composed_run, command, opts, run_dir)
    with scratch_sweep(dry_run and bool(SWEEP & set(flags))) as sweep:
        # Overrides first (dspark's settings, then the user's, which win), flags last: a flag
        # with an optional value (`--info`) must not take an override for its value.
        return run_hydra_app(f"dspark {name}", config, task,
                             [*hydra_settings(name, opts), *sweep, *overrides, *flags])


def store_schema(command: Command) -> None:
    """The one primary schema the command composes, in Hydra's ConfigStore: its own, or the
    shared launch schema (only that one: every composition deep-copies the whole store)."""
    (command.store_schema or register_launch_schema)()


_HW_OVERRIDE = re.compile(r"^(\+{0,2})hw=")
# `~hw`, `~hw=X`, `hw=null`: the group removed (Hydra would compose no `hw`, or fail on null).
_HW_REMOVED = re.compile(r"^(~hw(=.*)?|\+{0,2}hw=(null|~)?)$")


def with_hardware(overrides: list[str], detect: bool) -> list[str]:
    """`hw=X` means `+hw=X` (hw is not in the defaults list); no hw at all means detect it,
    for commands that plan a launch on this machine (`detect`)."""
    out, has_hw = [], False
    for item in overrides:
        if _HW_REMOVED.match(item):
            raise UsageError(f"{printable(item)} removes the hardware profile, and every launch "
                             "is planned for one.",
                             hint="name one with +hw=<profile> (`dspark env` lists them), or give "
                             "no hw to detect this machine's")
        match = _HW_OVERRIDE.match(item)
        if match:
            has_hw = True
            if not match.group(1):
                item = "+" + item
        out.append(item)
    if detect and not has_hw:
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


def composed_run(command: Command, opts: argparse.Namespace, run_dir: str | None,
                 cfg: Any) -> int:
    """Hydra's job: the composed config's secrets learnt (and scrubbed from Hydra's files),
    its keys and ranges checked, made the schema's dataclasses, and the command run on them.
    An error is its exit code here: Hydra would print it and exit 1, as if a check had failed."""
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
    store_schema(command)
    return shell_completion(command, plain, flags)
