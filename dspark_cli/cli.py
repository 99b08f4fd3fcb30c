"""`dspark <command> [hydra overrides] [--flags]`: one Hydra app per command.

Hydra has no subcommands, so this dispatcher takes the command name and dspark's own flags off
the command line and hands the rest to the command's `@hydra.main` app (keeping `--cfg job`,
`--help`, `-m` and shell completion). Errors are mapped to exit codes here and only here.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dspark_cli import __version__
from dspark_cli.errors import DsparkError, ExitCode, UsageError


@dataclass(frozen=True)
class Command:
    module: str
    config: str
    help: str


COMMANDS: dict[str, Command] = {
    "serve": Command("dspark_cli.commands.serve", "serve",
                     "compose, check and launch vLLM with DSpark (--dry-run prints it)"),
    "verify-checkpoint": Command("dspark_cli.commands.verify_checkpoint", "verify-checkpoint",
                                 "verify a checkpoint: integrity, pins, hashes, confidence head"),
    "smoke": Command("dspark_cli.commands.smoke", "smoke",
                     "boot the planned server, check it live, give a verdict"),
    "bench": Command("dspark_cli.commands.bench", "bench",
                     "run a benchmark protocol over arms x concurrencies"),
}

_HW_OVERRIDE = re.compile(r"^(\+{0,2})hw=")


def top_help() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {c.help}" for name, c in COMMANDS.items()]
    return (
        "usage: dspark <command> [hydra overrides ...] [--flags]\n\n"
        "DSpark speculative decoding on vLLM: from checkpoint to verified, benchmarked "
        "serving.\n\ncommands:\n" + "\n".join(lines) + "\n\n"
        "`dspark <command> --help` lists its flags, config groups and options.\n"
        "Exit codes: 0 ok, 1 a check failed, 2 usage or config error, 3 server failed, "
        "130 interrupted.\n"
    )


def err(message: str) -> None:
    print(f"dspark: {message}", file=sys.stderr)


def with_hardware(overrides: list[str]) -> list[str]:
    """`hw=X` means `+hw=X` (hw is not in the defaults list); no hw at all means detect it."""
    out, has_hw = [], False
    for item in overrides:
        match = _HW_OVERRIDE.match(item)
        if match:
            has_hw = True
            if not match.group(1):
                item = "+" + item
        out.append(item)
    if not has_hw:
        from dspark_cli.machine.profiles import detected_profile

        out.append(f"+hw={detected_profile()}")
    return out


def _parser(name: str, add_arguments: Callable[[argparse.ArgumentParser], None]) -> Any:
    parser = argparse.ArgumentParser(prog=f"dspark {name}", add_help=False, allow_abbrev=False)
    parser.add_argument("--debug", action="store_true",
                        help="show Python tracebacks for errors")
    add_arguments(parser)
    return parser


def run_command(name: str, argv: list[str]) -> int:
    command = COMMANDS[name]
    module = importlib.import_module(command.module)
    opts, overrides = _parser(name, module.add_arguments).parse_known_args(argv)
    unknown = [o for o in overrides if o.startswith("--") and o.split("=")[0] not in HYDRA_FLAGS]
    if unknown:
        raise UsageError(f"unknown flag {unknown[0]!r} for `dspark {name}`; "
                    f"`dspark {name} --help` lists them")
    overrides = with_hardware(overrides)
    # Hydra's argparse wants its flags before the overrides: keep flags (and their values)
    # first, then dspark's Hydra settings, then the user's overrides, which win.
    plain = [o for o in overrides if not o.startswith("-") and ("=" in o or o[:1] in "+~")]
    flags = [o for o in overrides if o not in plain]

    from dspark_cli.config.strict import check_known_keys

    def task(cfg: Any) -> int:
        try:
            check_known_keys(cfg)
            return int(module.run(cfg, opts) or 0)
        except DsparkError as e:
            if opts.debug:
                raise
            err(e.message + (f"\n  hint: {e.hint}" if e.hint else ""))
            return int(e.exit_code)
        except Exception as e:  # Hydra would print it and exit 1, as if a check had failed
            if opts.debug:
                raise
            err(f"unexpected {type(e).__name__}: {e} (rerun with --debug for the traceback)")
            return int(ExitCode.INTERNAL)

    if getattr(opts, "dry_run", False) and not flags:
        # A plain dry run needs no run directory, logging or sweep: compose once with the
        # Compose API (hydra.main composes twice), or not at all when this exact composition
        # is cached, and plan.
        from dspark_cli.config.cache import cached_compose

        return task(cached_compose(command.config, plain,
                                   lambda: compose_once(module, command.config, plain)))
    register_schemas(module)
    settings = hydra_settings(name, opts)
    if "--help" in flags:
        print(_parser(name, module.add_arguments).format_help())
        settings += [f"hydra.help.header='dspark {name}: {command.help}'",
                     "hydra.help.footer='Overrides: group=option, key=value, +key=value adds a "
                     "key to a free-form map. Exit codes: 0 ok, 1 check failed, 2 usage or "
                     "config error, 3 server failed, 130 interrupted.'"]
    return run_hydra_app(name, command.config, task, [*flags, *settings, *plain])


def register_schemas(module: Any) -> None:
    """Put the shared schema and the command's own primary schema in Hydra's ConfigStore."""
    from dspark_cli.config import schema

    schema.register()
    if hasattr(module, "register"):
        module.register()


def compose_once(module: Any, config: str, overrides: list[str]) -> Any:
    """The composed config, with Hydra's composition errors as usage errors."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from dspark_cli.paths import conf_dir

    register_schemas(module)
    try:
        with initialize_config_dir(str(conf_dir()), version_base="1.3"):
            return compose(config, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        cause = f"\n{e.__cause__}" if e.__cause__ and str(e.__cause__) not in str(e) else ""
        raise UsageError(f"{e}{cause}") from None


def run_hydra_app(name: str, config: str, task: Callable[[Any], int], argv: list[str]) -> int:
    """Run `task` as a `@hydra.main` app (run, multirun, --cfg, --help, completion); the worst
    exit code of its jobs, or USAGE when Hydra rejects the config before any job runs."""
    import hydra

    from dspark_cli.paths import conf_dir

    state: dict[str, Any] = {"ran": False, "code": 0}

    @hydra.main(config_path=str(conf_dir()), config_name=config, version_base="1.3")
    def app(cfg: Any) -> None:
        state["ran"] = True
        state["code"] = max(state["code"], task(cfg))

    saved = sys.argv
    sys.argv = [f"dspark {name}", *argv]
    try:
        app()
    except SystemExit as e:
        # Hydra exits 1 after printing a composition error; that is a config error to us.
        if not state["ran"] and e.code not in (0, None):
            return int(ExitCode.USAGE)
        raise
    finally:
        sys.argv = saved
    return state["code"]


def hydra_settings(name: str, opts: argparse.Namespace) -> list[str]:
    """dspark's Hydra defaults, placed before the user's overrides so those win: runs under
    runs/<command>/, no Hydra log file, and a dry run that writes nothing at all."""
    # `read_only`: a command that never writes (verify-checkpoint) gets no run directory either.
    logging = ["hydra/job_logging=none", "hydra/hydra_logging=dspark"]
    if getattr(opts, "dry_run", False) or getattr(opts, "read_only", False):
        return [*logging, "hydra.output_subdir=null", "hydra.run.dir=."]
    stamp = "${now:%Y%m%d-%H%M%S}"
    return [*logging, f"hydra.run.dir=runs/{name}/{stamp}",
            f"hydra.sweep.dir=runs/{name}/multirun-{stamp}"]


HYDRA_FLAGS = {
    "--cfg", "--help", "--hydra-help", "--multirun", "--config-path", "--config-name",
    "--config-dir", "--info", "--package", "--resolve", "--run", "--shell-completion",
    "--experimental-rerun", "--version",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(top_help(), end="")
        return 0 if argv else int(ExitCode.USAGE)
    if argv[0] == "--version":
        print(f"dspark {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f" Did you mean `dspark {close[0]}`?" if close else ""
        err(f"unknown command {name!r}.{hint} Commands: {', '.join(COMMANDS)}.")
        return int(ExitCode.USAGE)
    debug = "--debug" in rest
    try:
        return run_command(name, rest)
    except DsparkError as e:
        if debug:
            raise
        err(e.message + (f"\n  hint: {e.hint}" if e.hint else ""))
        return int(e.exit_code)
    except KeyboardInterrupt:
        err("cancelled.")
        return int(ExitCode.INTERRUPTED)
    except Exception as e:
        if debug:
            raise
        err(f"unexpected {type(e).__name__}: {e} (rerun with --debug for the traceback)")
        return int(ExitCode.INTERNAL)


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
