"""`dspark serve deploy=slurm`'s action: submit the job, say its id, wait (with progress) until
the head's `/health` answers, then follow the job until it ends or we are told to stop. Ctrl-C,
SIGTERM and every failure cancel the job and wait until it has left the queue."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from dspark_cli.console import progress
from dspark_cli.deploy import slurm_job
from dspark_cli.errors import ServerError
from dspark_cli.server import probe
from dspark_cli.server.process import sigterm_as_interrupt

PROGRESS_EVERY_S = 15.0
TAIL_LINES = 15


@dataclass(frozen=True)
class SlurmServe:
    script: Path
    output: str  # sbatch --output pattern (`%j` = job id)
    api_port: int
    ready_timeout_s: float
    poll_s: float
    cancel_timeout_s: float


def _tail(path: Path, n: int = TAIL_LINES) -> tuple[str, ...]:
    try:
        return tuple(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ()


def serve(job: SlurmServe) -> int:
    """Never returns while the job serves; KeyboardInterrupt after a cancel on Ctrl-C/SIGTERM,
    ServerError when the job fails, ends or never gets healthy."""
    with sigterm_as_interrupt():
        job_id = slurm_job.submit(job.script, job.output)
        log = Path(job.output.replace("%j", job_id))
        progress(f"submitted Slurm job {job_id}; its output: {log}")
        done = False
        try:
            url = _wait_healthy(job, job_id, log)
            progress(f"ready at {url} (Slurm job {job_id}); Ctrl-C cancels the job")
            while (current := slurm_job.state(job_id)) is not None and current.active:
                time.sleep(job.poll_s)
            done = True
            raise ServerError.failed(f"Slurm job {job_id} ended on its own", log, _tail(log))
        finally:
            if not done:
                progress(f"cancelling Slurm job {job_id}")
                if not slurm_job.cancel(job_id, job.cancel_timeout_s):
                    progress(f"job {job_id} is still in the queue after "
                             f"{job.cancel_timeout_s:.0f} s; check `squeue -j {job_id}`")


def _wait_healthy(job: SlurmServe, job_id: str, log: Path) -> str:
    """The head's base URL once its /health answers 200; the ready timeout counts from the
    moment the job runs (a queue's wait is not the server's)."""
    start = time.monotonic()
    last_note, said = 0.0, ""
    url, running_since = None, None
    while True:
        current = slurm_job.state(job_id)
        if current is None or not current.active:
            what = current.state if current else "left the queue"
            raise ServerError.failed(f"Slurm job {job_id} {what.lower()} before /health "
                                     "answered 200", log, _tail(log))
        if current.state == "RUNNING" and url is None and current.nodes:
            url = f"http://{slurm_job.head_address(current.nodes)}:{job.api_port}"
            running_since = time.monotonic()
        if url is not None and probe.healthy(url):
            return url
        waited = time.monotonic() - start
        note = (f"job {job_id} {current.state.lower()}"
                + (f" ({current.reason})" if current.state == "PENDING" else "")
                + (f", waiting for {url}/health" if url else ""))
        if note != said or waited - last_note >= PROGRESS_EVERY_S:
            progress(f"{note} ({waited:.0f} s)")
            said, last_note = note, waited
        if running_since is not None and time.monotonic() - running_since > job.ready_timeout_s:
            raise ServerError.failed(f"/health did not answer 200 within "
                                     f"{job.ready_timeout_s:.0f} s (server.ready_timeout_s)",
                                     log, _tail(log))
        time.sleep(job.poll_s)
