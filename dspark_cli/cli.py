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
from dspark_cli.errors import DsparkError, ExitCode


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
        from dspark_cli.hwprofiles import detected_profile

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
        raise_usage(f"unknown flag {unknown[0]!r} for `dspark {name}`; "
                    f"`dspark {name} --help` lists them")
    overrides = with_hardware(overrides)

    import hydra

    from dspark_cli.config import schema
    from dspark_cli.config.strict import check_known_keys
    from dspark_cli.paths import conf_dir

    schema.register()
    if hasattr(module, "register"):
        module.register()
    state: dict[str, Any] = {"ran": False, "code": 0}

    @hydra.main(config_path=str(conf_dir()), config_name=command.config, version_base="1.3")
    def app(cfg: Any) -> None:
        state["ran"] = True
        try:
            check_known_keys(cfg)
            code = int(module.run(cfg, opts) or 0)
        except DsparkError as e:
            if opts.debug:
                raise
            err(e.message + (f"\n  hint: {e.hint}" if e.hint else ""))
            code = int(e.exit_code)
        state["code"] = max(state["code"], code)

    if "--help" in overrides:
        print(_parser(name, module.add_arguments).format_help())
    saved = sys.argv
    # Hydra's argparse wants its flags before the overrides: keep flags (and their values)
    # first, then dspark's Hydra settings, then the user's overrides, which win.
    plain = [o for o in overrides if not o.startswith("-") and ("=" in o or o[:1] in "+~")]
    flags = [o for o in overrides if o not in plain]
    sys.argv = [f"dspark {name}", *flags, *hydra_settings(name, opts), *plain]
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
    if getattr(opts, "dry_run", False):
        return ["hydra/job_logging=none", "hydra.output_subdir=null", "hydra.run.dir=."]
    stamp = "${now:%Y%m%d-%H%M%S}"
    return ["hydra/job_logging=none", f"hydra.run.dir=runs/{name}/{stamp}",
            f"hydra.sweep.dir=runs/{name}/multirun-{stamp}"]


HYDRA_FLAGS = {
    "--cfg", "--help", "--hydra-help", "--multirun", "--config-path", "--config-name",
    "--config-dir", "--info", "--package", "--resolve", "--run", "--shell-completion",
    "--experimental-rerun", "--version",
}


def raise_usage(message: str) -> None:
    from dspark_cli.errors import UsageError

    raise UsageError(message)


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


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
