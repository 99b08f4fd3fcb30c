"""A port claimed on this host for as long as one job runs, so the parallel jobs of one sweep
that land on the same host (submitit_local, Slurm jobs sharing a node) never pick the same
port: each takes an exclusive lock file for its port, and the kernel drops the lock when the job
ends, however it ends."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dspark_cli.errors import ServerError
from dspark_cli.server.process import port_in_use

SPAN = 200  # how many ports from the configured one a job may move up


def lock_dir() -> Path:
    """Per host and user (a node-local /tmp on a cluster is exactly one host's)."""
    return Path(tempfile.gettempdir()) / f"dsk-port-locks-{os.getuid()}"


@contextlib.contextmanager
def claimed_port(host: str, first: int, span: int = SPAN, width: int = 1) -> Iterator[int]:
    """The first port from `first` that no other job holds and nothing listens on, held until
    the block ends; ServerError when all `span` ports are taken. `width` > 1 claims a block of
    ports `port .. port + width - 1` (every node of a hybrid layout serves on `port + rank`):
    blocks start `width` apart, so the jobs of one sweep never overlap."""
    directory = lock_dir()
    directory.mkdir(mode=0o700, exist_ok=True)
    for port in range(first, min(first + span, 65537 - width), width):
        fd = os.open(directory / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if any(port_in_use(host, p) for p in range(port, port + width)):
            os.close(fd)
            continue
        try:
            yield port
        finally:
            os.close(fd)
        return
    raise ServerError(f"every port from {first} to {first + span - 1} on {host} is held by "
                      "another job or in use", hint="choose another range with server.port=N")
