"""A run's directory, before Hydra writes into it and after a run that failed.

Hydra makes `hydra.run.dir` (and any folder above it that is missing) and writes its record
(`.hydra/config.yaml`, `hydra.yaml`, `overrides.yaml`) before the command runs, following any
link on the way. So before it does (`RunDirGuard.on_run_start`, a Hydra callback), a directory
that cannot be one (a file, a folder under a file) and a `.hydra` (or one of its files) that is a
link are refused, and what exists there is noted. After a run that failed (a preflight refused,
a config was wrong) only what this run made is removed, nothing that was there before it: the
directory is left as it was found, and its path said when this run's files stay in it.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from dspark_cli.console import progress
from dspark_cli.errors import ExitCode, UsageError

HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")


class Refusal(BaseException):
    """A refused directory on its way out of Hydra, which turns an `Exception` raised in a
    callback into a warning and goes on; `run_hydra_app` raises `error` again."""

    def __init__(self, error: UsageError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(frozen=True)
class Found:
    """A run directory as it was before Hydra made or wrote anything in it."""

    directory: Path
    subdir: str | None  # Hydra's own folder in it (`hydra.output_subdir`), None: none
    made: tuple[Path, ...]  # what Hydra will make there that did not exist, in making order
    names: frozenset[str]  # what the directory and its subdir held (`name`, `.hydra/name`)


def _names(directory: Path, subdir: str | None) -> frozenset[str]:
    names: set[str] = set()
    for folder, prefix in ((directory, ""), (directory / (subdir or ""), f"{subdir}/")):
        if subdir is None and prefix:
            continue
        try:
            names |= {prefix + entry.name for entry in folder.iterdir()}
        except OSError:
            continue
    return frozenset(names)


def survey(directory: Path, subdir: str | None, key: str = "hydra.run.dir") -> Found:
    """`directory` (given as `key`) before a run writes there; UsageError when it cannot be a
    run directory or Hydra's files would be written through a link."""
    shown = shlex.quote(str(directory))
    missing: list[Path] = []
    existing = directory
    while not os.path.lexists(existing):
        missing.append(existing)
        existing = existing.parent
    if not existing.is_dir():
        what = "is not a directory" if existing == directory else (
            f"is under {shlex.quote(str(existing))}, which is not a directory")
        raise UsageError(f"{key} {shown} {what}; a run writes its record there.",
                         hint=f"give {key} a directory (or a path that does not exist)")
    made = list(reversed(missing))
    if subdir is not None:
        own = directory / subdir
        for path in (own, *(own / name for name in HYDRA_FILES)):
            if path.is_symlink():
                raise UsageError(
                    f"{shlex.quote(str(path))} is a link: Hydra would write the run's record "
                    "through it, somewhere else; nothing was written.",
                    hint=f"remove the link, or give {key} another directory")
            if not os.path.lexists(path):
                made.append(path)
        if os.path.lexists(own) and not own.is_dir():
            raise UsageError(f"{shlex.quote(str(own))} is not a directory; Hydra writes the "
                             "run's record there.", hint=f"give {key} another directory")
    return Found(directory, subdir, tuple(made), _names(directory, subdir))


def settle(found: Found, code: int) -> None:
    """After a run that failed: remove what it made when it wrote nothing but Hydra's record
    (files first, then the folders it made, each only if empty); otherwise, or when Hydra
    rewrote a record that was there before, say the directory's path once, ready to paste."""
    if code == ExitCode.OK:
        return
    made = set(found.made)
    own = {f"{found.subdir}/{name}" for name in HYDRA_FILES} if found.subdir else set()
    new = _names(found.directory, found.subdir) - found.names
    only_record = all(name in own or name == found.subdir for name in new)
    if only_record:
        for path in reversed(found.made):
            try:
                if path.is_dir() and not path.is_symlink():
                    path.rmdir()
                else:
                    path.unlink()
            except OSError:
                break  # not empty (or not ours to remove): the rest above it stays too
    rewritten = found.subdir is not None and any(
        found.directory / found.subdir / name not in made for name in HYDRA_FILES)
    if not only_record or (rewritten and found.directory.is_dir()):
        progress(f"run directory {shlex.quote(str(found.directory))}")


class RunDirGuard(Callback):
    """A Hydra callback (`hydra.callbacks`, every run that writes a directory): `survey` when a
    run starts, before Hydra makes anything; `settle` with the run's exit code when it ends
    (the task returns it). A multirun's sweep directory is checked for planted links too."""

    def __init__(self) -> None:
        self.found: Found | None = None

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        saved = HydraConfig.instance().cfg
        HydraConfig.instance().set_config(config)  # `${hydra:...}` in the directory resolves
        try:
            directory = str(OmegaConf.select(config, "hydra.run.dir"))
        except OmegaConfBaseException:
            return  # Hydra resolves it next and raises, which dspark turns into a usage error
        finally:
            HydraConfig.instance().cfg = saved
        subdir = config.hydra.output_subdir
        try:
            self.found = survey(Path(os.path.abspath(directory)),
                                None if subdir is None else str(subdir))
        except UsageError as e:
            raise Refusal(e) from None

    def on_run_end(self, config: Any, job_return: Any = None, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        if (self.found is not None and job_return is not None
                and job_return.status == JobStatus.COMPLETED
                and isinstance(job_return.return_value, int)):
            settle(self.found, job_return.return_value)

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        try:
            _survey_sweep(config)
        except UsageError as e:
            raise Refusal(e) from None


def _survey_sweep(config: Any) -> None:
    """A multirun's sweep directory and the jobs' folders already in it, as `survey` checks a
    run's directory (Hydra writes `multirun.yaml` and each job's record there)."""
    sweep = Path(os.path.abspath(str(config.hydra.sweep.dir)))
    subdir = config.hydra.output_subdir
    survey(sweep, None, "hydra.sweep.dir")
    if (sweep / "multirun.yaml").is_symlink():
        raise UsageError(f"{shlex.quote(str(sweep / 'multirun.yaml'))} is a link: Hydra would "
                         "write the sweep's record through it; nothing was written.",
                         hint="remove the link, or give hydra.sweep.dir another directory")
    if subdir is not None and sweep.is_dir():
        for job in sweep.iterdir():
            if job.is_dir() and not job.is_symlink():
                survey(job, str(subdir), "hydra.sweep.dir")
