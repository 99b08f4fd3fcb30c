"""Each multirun job's outcome, back on the terminal that started the sweep.

A launcher that runs jobs in other processes (`hydra/launcher=submitit_local`, `submitit_slurm`)
hands the jobs' return values to Hydra's sweeper, which drops them, and the jobs' stderr goes to
`.submitit/*/*.err`: a failed job would leave the terminal silent with exit 0. So each job
writes its exit code and its last `dspark:` lines to `JOB_FILE` in its own output directory,
and the command reads them all from the sweep directory when the sweep ends.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from hydra.experimental.callback import Callback

from dspark_cli.errors import ExitCode, worst

JOB_FILE = ".dspark-job.json"
KEPT_LINES = 8


@dataclass(frozen=True)
class JobOutcome:
    """What one multirun job ended with."""

    directory: str
    code: int | None  # None: the job left no outcome (it died, or never started)
    lines: tuple[str, ...] = ()

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
            outcome = JobOutcome(str(directory), code[-1] if code else None, tuple(tee.kept))
            directory.mkdir(parents=True, exist_ok=True)
            (directory / JOB_FILE).write_text(json.dumps(outcome.to_dict()))


_SWEEPS: list[Path] = []  # sweep directories of multiruns started in this process


def sweep_dir() -> Path | None:
    """The sweep directory of the last multirun started in this process, or None."""
    return _SWEEPS[-1] if _SWEEPS else None


class SweepWatch(Callback):
    """A Hydra callback (`hydra.callbacks`): notes the sweep directory when a multirun starts,
    in the process that launches the jobs (Hydra sets no HydraConfig there)."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        _SWEEPS.append(Path(str(config.hydra.sweep.dir)))


CALLBACK = f"+hydra.callbacks.dspark_sweep._target_={__name__}.SweepWatch"


def outcomes(sweep: Path) -> list[JobOutcome]:
    """Every job of the sweep, by its directory: the ones that wrote an outcome, and the ones
    whose directory holds Hydra's record but no outcome (they died)."""
    found = []
    for job in sorted((p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")),
                      key=lambda p: (len(p.name), p.name)):
        record = job / JOB_FILE
        if record.is_file():
            data = json.loads(record.read_text())
            found.append(JobOutcome(str(job), data["code"], tuple(data["lines"])))
        elif (job / ".hydra").is_dir():
            found.append(JobOutcome(str(job), None))
    return found


def print_failures(sweep: Path, echo: TextIO = sys.stderr) -> int:
    """One paragraph per failed job on `echo`; the worst exit code (1 for a job that left no
    outcome)."""
    jobs = outcomes(sweep)
    failed = [j for j in jobs if j.code != 0]
    for job in failed:
        what = (f"exited with code {job.code}" if job.code is not None
                else "left no outcome (it died; its log is under "
                     f"{sweep / '.submitit'} when submitit ran it)")
        echo.write(f"dspark: multirun job {job.directory} {what}"
                   + "".join(f"\n    {line}" for line in job.lines) + "\n")
    if failed:
        echo.write(f"dspark: {len(failed)} of {len(jobs)} multirun jobs failed.\n")
    return worst(int(ExitCode.CHECK_FAILED) if j.code is None else j.code for j in failed)
