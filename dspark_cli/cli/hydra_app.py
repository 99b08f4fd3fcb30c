"""Running one dspark command as Hydra: the `@hydra.main` app (every run, dry or not, composed
the same way), dspark's Hydra settings, and shell completion that calls back the right
command. Loaded only where Hydra runs (compose.py)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dspark_cli.cli.help import COMPLETION
from dspark_cli.cli.mistakes import usage_error
from dspark_cli.cli.multirun import in_multirun_job, print_failures, recorded, watched
from dspark_cli.cli.overrides import hydra_value
from dspark_cli.cli.run_dir import Refusal
from dspark_cli.errors import ExitCode, UsageError, worst
from dspark_cli.launch import secrets
from dspark_cli.paths import conf_dir

if TYPE_CHECKING:
    from dspark_cli.cli.command import Command


RUN_DIR = ("hydra.run.dir", "++hydra.run.dir")


def split_run_dir(overrides: list[str]) -> tuple[list[str], str | None]:
    """A dry run's overrides without `hydra.run.dir` (Hydra would make that directory; a dry
    run runs in `.`), and the last one given, which the run would write under."""
    kept = [o for o in overrides if o.partition("=")[0] not in RUN_DIR]
    given = [o for o in overrides if o.partition("=")[0] in RUN_DIR]
    return kept, given[-1] if given else None


def planned_run_dir(override: str | None) -> Path | None:
    """Where a run given `override` (`hydra.run.dir=...`) would write, relative to the current
    directory, read by Hydra's own override parser and resolved inside the app (`${now:...}`,
    `${hydra:...}`); None without one. A value that does not resolve is a usage error."""
    if override is None:
        return None
    value = OverridesParser.create().parse_override(override).value()
    try:
        resolved = str(OmegaConf.create({"dir": value}).dir)
    except OmegaConfBaseException as e:
        raise UsageError(f"hydra.run.dir cannot be resolved in a dry run: {e}",
                         hint="give the dry run a hydra.run.dir that resolves") from None
    return Path(os.path.normpath(Path.cwd() / Path(resolved).expanduser()))


# Hydra's switch that makes `@hydra.main` raise a composition error instead of printing it.
_RAISE = "HYDRA_FULL_ERROR"


@contextlib.contextmanager
def _environ(name: str, value: str | None) -> Iterator[None]:
    """`name` set to `value` (None: unset) inside the block, as it was after."""
    saved = os.environ.get(name)
    _setenv(name, value)
    try:
        yield
    finally:
        _setenv(name, saved)


def _setenv(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def run_hydra_app(prog: str, config: str, task: Callable[[Any], int], argv: list[str]) -> int:
    """Run `task` as a `@hydra.main` app (run, multirun, --cfg, --info, completion); the worst
    exit code of its jobs. A config Hydra rejects is a UsageError (cli/mistakes.py)."""
    state: dict[str, Any] = {"ran": False, "code": 0}

    @hydra.main(config_path=str(conf_dir()), config_name=config, version_base="1.3")
    def app(cfg: Any) -> int:
        state["ran"] = True
        with _environ(_RAISE, None), recorded(in_multirun_job()) as code:
            code.append(task(cfg))  # the job's own processes never see Hydra's switch
        state["code"] = worst((state["code"], code[-1]))
        return code[-1]  # the job's return value: what RunDirGuard settles the run with

    saved = sys.argv
    try:
        with watched(_sweeps(argv)) as (watch, swept), _environ(_RAISE, "1"):
            sys.argv = [prog, *watch, *argv]
            app()
            # Jobs in other processes (submitit) report only through their outcome files.
            sweep = swept()
        if sweep is not None and sweep.directory.is_dir():
            state["code"] = worst((state["code"], print_failures(
                sweep.directory, before=sweep.before, this=sweep.id)))
    except Refusal as e:  # a run directory refused before Hydra wrote into it
        raise e.error from None
    except (HydraException, OmegaConfBaseException) as e:
        raise usage_error(e, [a for a in argv if not a.startswith("-")], config,
                          sweeping=bool(SWEEP & set(argv))) from None
    except SystemExit as e:
        if isinstance(e.__context__, BrokenPipeError):  # Hydra printed into a closed pipe
            raise e.__context__ from None
        # Hydra exits after printing an error of its own; that is a usage error to us.
        if not state["ran"] and e.code not in (0, None):
            return int(ExitCode.USAGE)
        raise
    finally:
        sys.argv = saved
    return state["code"]


SWEEP = {"-m", "--multirun"}


@contextlib.contextmanager
def scratch_sweep(dry_run: bool) -> Iterator[list[str]]:
    """The settings of a multirun dry run: Hydra writes a sweep directory for every multirun,
    so a dry one writes it to a temporary directory, removed after; nothing for other runs."""
    if not dry_run:
        yield []
        return
    scratch = tempfile.mkdtemp(prefix="dspark-dry-run-")
    try:
        yield [f"hydra.sweep.dir={hydra_value(scratch)}"]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _sweeps(argv: list[str]) -> bool:
    """Whether this command line runs a multirun's jobs (not only prints or completes it)."""
    shown = {"--cfg", "-c", "--info", "-i", "--hydra-help", *COMPLETION}
    return bool(SWEEP & set(argv)) and not shown & set(argv)


# Hydra's logging stays quiet on the way to a plan (no log file; dspark's console format).
_QUIET_HYDRA = ["hydra/job_logging=none", "hydra/hydra_logging=dspark"]


def hydra_settings(name: str, opts: argparse.Namespace) -> list[str]:
    """dspark's Hydra defaults, placed before the user's overrides so those win: runs under
    runs/<command>/ (refused when it cannot be one, settled after a failure: run_dir.py), no
    Hydra log file, and a dry run without a run directory."""
    # `read_only`: a command that never writes (verify-checkpoint) gets no run directory either.
    if getattr(opts, "dry_run", False) or getattr(opts, "read_only", False):
        return [*_QUIET_HYDRA, "hydra.output_subdir=null", "hydra.run.dir=."]
    stamp = "${now:%Y%m%d-%H%M%S}"
    return [*_QUIET_HYDRA, f"hydra.run.dir=runs/{name}/{stamp}",
            f"hydra.sweep.dir=runs/{name}/multirun-{stamp}",
            "+hydra.callbacks.dspark_run_dir._target_=dspark_cli.cli.run_dir.RunDirGuard"]


# Hydra's bash script calls back `<program> -sc query=bash`; dspark's program needs the command
# word the user typed, which the script has at hand as ${words[1]}.
_QUERY_CALL = "$helper -sc query=bash"


def shell_completion(command: Command, plain: list[str], flags: list[str]) -> int:
    """Hydra's shell completion for one command: the installed script calls back
    `dspark <command> -sc query=...`, and a query sees the line without dspark's own words
    (a command composing no config completes against the shared `launch` one); its schema
    is stored (compose.py)."""
    if any(o.startswith("query=") for o in plain) and "COMP_LINE" in os.environ:
        os.environ["COMP_LINE"] = completion_line(os.environ["COMP_LINE"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run_hydra_app("dspark", command.config or "launch", lambda cfg: 0,
                             [*plain, *flags])
    sys.stdout.write(out.getvalue().replace(_QUERY_CALL, "$helper ${words[1]} -sc query=bash"))
    return code


def completion_line(line: str) -> str:
    """`dspark serve --dry-run +hw=mi` as Hydra's completer expects it: `dspark +hw=mi` (the
    program, then overrides only; a trailing space still means a new word)."""
    words = line.split()
    kept = [w for w in words[2:] if not w.startswith("-")]
    return " ".join(words[:1] + kept) + (" " if line.endswith(" ") else "")


def redact_hydra_files(cfg: Any) -> None:
    """Hydra saves the job's config (`.hydra/config.yaml`, and a multirun's `multirun.yaml`)
    before the job runs, unresolved. Secrets given as overrides are references by then
    (launch/secrets.py); one typed into a config file is rewritten there as redacted."""
    if not HydraConfig.initialized():
        return
    hydra = HydraConfig.get()
    data = OmegaConf.to_container(cfg, resolve=False)
    if not any(True for _ in secrets.values_in(data)):
        return
    written = []
    if hydra.output_subdir is not None:
        written.append(Path(hydra.runtime.output_dir) / hydra.output_subdir / "config.yaml")
    if str(hydra.mode) == "RunMode.MULTIRUN":
        written.append(Path(hydra.sweep.dir) / "multirun.yaml")
    for path in written:
        if path.is_file():
            saved = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            path.write_text(OmegaConf.to_yaml(secrets.redact(saved)))
