"""A submitted Slurm job, through Slurm's own clients: submit (`sbatch --parsable`), its state
(`squeue`), where its head node answers (`scontrol`), and cancel (`scancel`, then wait until
the job has left the queue). Every call has a timeout; a missing client is a clear error."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dspark_cli.errors import ServerError, UsageError

CLIENT_TIMEOUT_S = 30.0
# squeue's states of a job that may still run; anything else (or no entry) means it ended.
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING",
          "SUSPENDED", "STAGE_OUT", "SIGNALING"}


@dataclass(frozen=True)
class JobState:
    state: str  # squeue's %T: PENDING, RUNNING, ...
    reason: str  # squeue's %r: why it waits (Resources, Priority, None)
    nodes: str  # squeue's %N: the node list once it runs

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def to_dict(self) -> dict[str, str]:
        return {"state": self.state, "reason": self.reason, "nodes": self.nodes}


CLIENTS = ("sbatch", "squeue", "scontrol", "scancel")


def require_clients() -> None:
    """UsageError naming the first of Slurm's clients that is not on PATH."""
    for name in CLIENTS:
        if shutil.which(name) is None:
            raise UsageError(f"`{name}` is not on PATH: deploy=slurm needs Slurm's clients "
                             f"({', '.join(CLIENTS)}) where dspark runs; nothing was submitted",
                             hint="run dspark on a login node of the cluster, or print the "
                             "script with --dry-run and submit it there")


def _client(*argv: str, check: bool = True,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True,
                              timeout=CLIENT_TIMEOUT_S,
                              env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired as e:
        raise ServerError(f"`{' '.join(argv)}` did not answer within {CLIENT_TIMEOUT_S:.0f} s; "
                          "is slurmctld up?") from e
    if check and done.returncode != 0:
        raise ServerError(f"`{' '.join(argv)}` failed (exit {done.returncode}): "
                          f"{done.stderr.strip() or done.stdout.strip()}")
    return done


def submit(script: Path, output: str, env: Mapping[str, str] | None = None) -> str:
    """The job id of the submitted script (its output goes to `output`, `%j` = the id). `env`
    is added to the environment sbatch hands the job (the secrets the script refers to by
    name), for this call only."""
    done = _client("sbatch", "--parsable", f"--output={output}", str(script), env=env)
    job = done.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise ServerError(f"sbatch answered {done.stdout.strip()!r}, not a job id")
    return job


def state(job: str) -> JobState | None:
    """The job's state now, or None when it has left the queue."""
    done = _client("squeue", "-h", "-j", job, "-o", "%T|%r|%N", check=False)
    line = done.stdout.strip().splitlines()
    if done.returncode != 0 or not line:
        return None
    parts = [*line[0].split("|"), "", ""][:3]
    return JobState(*parts)


def final_state(job: str) -> str | None:
    """How a job that left squeue ended, from slurmctld's memory of it (`scontrol show job`,
    kept `MinJobAge` seconds): "FAILED (exit code 7:0)", "CANCELLED", ...; None once forgotten."""
    done = _client("scontrol", "show", "job", "-o", job, check=False)
    fields = dict(f.split("=", 1) for f in done.stdout.split() if "=" in f)
    state = fields.get("JobState")
    if done.returncode != 0 or not state:
        return None
    code = fields.get("ExitCode", "0:0")
    return state + (f" (exit code {code})" if code != "0:0" else "")


def head_address(nodes: str) -> str:
    """The address of a node list's first node: slurm.conf's NodeAddr, else its DNS name's;
    the same resolution the job script makes."""
    head = _client("scontrol", "show", "hostnames", nodes).stdout.split()[0]
    shown = _client("scontrol", "show", "node", head).stdout
    addr = next((f.split("=", 1)[1] for f in shown.split() if f.startswith("NodeAddr=")), head)
    if addr == head:
        try:
            addr = socket.gethostbyname(head)
        except OSError as e:
            raise ServerError(f"cannot resolve the address of head node {head}: {e}") from e
    return addr


def cancel(job: str, timeout_s: float, poll_s: float = 0.5) -> bool:
    """scancel, then wait until the job has left the queue's active states; whether it did."""
    _client("scancel", job, check=False)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = state(job)
        if current is None or not current.active:
            return True
        time.sleep(poll_s)
    return False
