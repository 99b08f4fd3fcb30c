"""Each multirun job's outcome, back on the terminal that started the sweep.

A launcher that runs jobs in other processes (`hydra/launcher=submitit_local`, `submitit_slurm`)
hands the jobs' return values to Hydra's sweeper, which drops them, and the jobs' stderr goes to
`.submitit/*/*.err`: a failed job would leave the terminal silent with exit 0. So each job
writes its exit code and its last `dspark:` lines to `JOB_FILE` in its own output directory,
and the command reads them all from the sweep directory when the sweep ends: only the jobs of
this sweep (a directory reused from an earlier sweep keeps that sweep's jobs, which are not this
one's to blame), each outcome read back through the one reader (a truncated or planted file is
a job that left no readable outcome, never an internal error). Each outcome names the sweep
that launched its job (an id of its own, in the jobs' Hydra config): a job of another sweep that
ends while this one runs (a queued Slurm job of an earlier sweep) is not this sweep's either.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from hydra.experimental.callback import Callback

from dspark_cli.cli.overrides import hydra_value
from dspark_cli.console import json_text
from dspark_cli.errors import ExitCode, UsageError, worst
from dspark_cli.untrusted import (
    INT,
    LIST,
    TEXT,
    check,
    load_json,
    printable,
    shown_path,
    write_atomic,
)

_OUTCOME = {"code": INT, "lines": LIST, "lines.*": TEXT, "directory": TEXT, "sweep": TEXT}
_OUTCOME_BYTES = 64 << 10

JOB_FILE = ".dspark-job.json"
KEPT_LINES = 8


@dataclass(frozen=True)
class JobOutcome:
    """What one multirun job ended with."""

    directory: str
    code: int | None  # None: the job left no outcome (it died, or never started)
    lines: tuple[str, ...] = ()
    sweep: str | None = None  # the id of the sweep that launched it (`SweepWatch.sweep`)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class _Tee(io.TextIOBase):
    """Writes through to `stream` and keeps the last lines dspark printed as errors."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.kept: list[str] = []
        self._partial = ""

    def write(self, text: str) -> int:
        self.stream.write(text)
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            if line.startswith("dspark:") or (line.startswith("  ") and self.kept):
                self.kept = [*self.kept, line][-KEPT_LINES:]
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def in_multirun_job() -> Path | None:
    """This multirun job's output directory, or None outside a multirun job."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    return Path(HydraConfig.get().runtime.output_dir)


def sweep_id() -> str | None:
    """The id of the sweep that launched this job (`watched`), None where none was given."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    watch = (HydraConfig.get().callbacks or {}).get(_CALLBACK) or {}
    found = watch.get("sweep")
    return found if isinstance(found, str) else None


@contextlib.contextmanager
def recorded(directory: Path | None) -> Iterator[list[int]]:
    """Around a job's task: its stderr kept, and its code (appended to the yielded list by the
    caller) written to `directory/JOB_FILE` at the end. Nothing when `directory` is None."""
    if directory is None:
        yield []
        return
    code: list[int] = []
    tee = _Tee(sys.stderr)
    with contextlib.redirect_stderr(tee):  # type: ignore[type-var]
        try:
            yield code
        finally:
            outcome = JobOutcome(str(directory), code[-1] if code else None, tuple(tee.kept),
                                 sweep_id())
            directory.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(UsageError):  # a job that cannot write it left none
                write_atomic(directory / JOB_FILE, json_text(outcome.to_dict()))


Stamp = tuple[tuple[int, int] | None, tuple[int, int] | None]  # outcome's, Hydra record's


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _jobs(sweep: Path) -> list[Path]:
    try:
        entries = list(sweep.iterdir())
    except OSError:
        return []
    return sorted((p for p in entries if p.is_dir() and not p.is_symlink()
                   and not p.name.startswith(".")), key=lambda p: (len(p.name), p.name))


def stamps(sweep: Path) -> dict[str, Stamp]:
    """Each job directory's outcome file and Hydra record as they are now (inode, mtime): a
    job of a later sweep rewrites both, so an unchanged one is an earlier sweep's."""
    return {job.name: (_stat(job / JOB_FILE), _stat(job / ".hydra" / "config.yaml"))
            for job in _jobs(sweep)}


_CALLBACK = "dspark_sweep"  # its name under `hydra.callbacks`


class SweepWatch(Callback):
    """A Hydra callback (`hydra.callbacks`): when a multirun starts, in the process that
    launches the jobs (Hydra sets no HydraConfig there), writes its sweep directory and the
    stamps of the jobs already there to `note`, a file of the caller's (`watched`). `sweep`
    is the sweep's id, which each of its jobs writes into its outcome (`sweep_id`)."""

    def __init__(self, note: str, sweep: str = "") -> None:
        del sweep  # each job reads it from its own Hydra config (`sweep_id`)
        self.note = Path(note)

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        sweep = Path(str(config.hydra.sweep.dir))
        self.note.write_text(json_text({"sweep": str(sweep), "stamps": stamps(sweep)}))


@dataclass(frozen=True)
class Sweep:
    """The sweep a multirun ran in, its jobs' stamps from before it started, and its id."""

    directory: Path
    before: dict[str, Stamp]
    id: str | None = None


@contextlib.contextmanager
def watched(sweeps: bool) -> Iterator[tuple[list[str], Callable[[], Sweep | None]]]:
    """The overrides that have a multirun note its sweep (`SweepWatch`), and a call that reads
    the sweep back once Hydra's app returned (None: no multirun started); nothing for a
    command line that runs no sweep (`sweeps` false)."""
    if not sweeps:
        yield [], lambda: None
        return
    scratch = Path(tempfile.mkdtemp(prefix="dspark-sweep-"))
    note = scratch / "sweep.json"
    this = uuid.uuid4().hex

    def read() -> Sweep | None:
        try:
            data = json.loads(note.read_text())
        except (OSError, ValueError):
            return None

        def stamp(pair: Any) -> tuple[int, int] | None:
            return None if pair is None else (int(pair[0]), int(pair[1]))

        return Sweep(Path(data["sweep"]), {name: (stamp(a), stamp(b))
                                           for name, (a, b) in data["stamps"].items()}, this)

    try:
        yield [f"+hydra.callbacks.{_CALLBACK}._target_={__name__}.SweepWatch",
               f"+hydra.callbacks.{_CALLBACK}.note={hydra_value(str(note))}",
               f"+hydra.callbacks.{_CALLBACK}.sweep={this}"], read
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _read(job: Path, record: Path) -> JobOutcome:
    """A job's outcome file, or an outcome saying it cannot be read (truncated, planted)."""
    try:
        data = load_json(record, job, _OUTCOME_BYTES)
        check(data, record, _OUTCOME, ("code",))
    except UsageError as e:
        return JobOutcome(str(job), None, (f"its outcome file is unreadable: {e.message}",))
    return JobOutcome(str(job), data["code"], tuple(data.get("lines") or ()), data.get("sweep"))


def outcomes(sweep: Path, before: dict[str, Stamp] | None = None,
             this: str | None = None) -> list[JobOutcome]:
    """Every job of the sweep, by its directory: the ones that wrote an outcome, and the ones
    whose directory holds Hydra's record but no outcome (they died). With `before` (`stamps`
    when this sweep started), a job's outcome or record left unchanged since then is an
    earlier sweep's in the same directory: its job is left out, or (its record rewritten, its
    outcome not) this sweep's job died. With `this` (the sweep's id), an outcome that names
    another sweep is that sweep's job, left out however fresh it is."""
    found = []
    for job in _jobs(sweep):
        record = job / JOB_FILE
        old_outcome, old_start = (before or {}).get(job.name, (None, None))
        fresh_outcome = os.path.lexists(record) and (
            before is None or old_outcome is None or _stat(record) != old_outcome)
        started = (job / ".hydra").is_dir() and (
            before is None or old_start is None
            or _stat(job / ".hydra" / "config.yaml") != old_start)
        if fresh_outcome:
            outcome = _read(job, record)
            if this is None or outcome.sweep in (None, this):
                found.append(outcome)
        elif started:
            found.append(JobOutcome(str(job), None))
    return found


def print_failures(sweep: Path, echo: TextIO | None = None,
                   before: dict[str, Stamp] | None = None, this: str | None = None) -> int:
    """One paragraph per failed job of this sweep (`before`, `this`: `outcomes`) on `echo`
    (stderr as it is at the call, so through the secret filter); the worst exit code (1 for a
    job that left no readable outcome)."""
    echo = echo or sys.stderr
    jobs = outcomes(sweep, before, this)
    failed = [j for j in jobs if j.code != 0]
    for job in failed:
        what = (f"exited with code {job.code}" if job.code is not None
                else "left no outcome (it died; its log is under "
                     f"{sweep / '.submitit'} when submitit ran it)")
        echo.write(f"dspark: multirun job {shown_path(job.directory)} {what}"
                   + "".join(f"\n    {printable(line)}" for line in job.lines) + "\n")
    if failed:
        echo.write(f"dspark: {len(failed)} of {len(jobs)} multirun jobs failed.\n")
    return worst(int(ExitCode.CHECK_FAILED) if j.code is None or not 0 <= j.code < 256
                 else j.code for j in failed)
