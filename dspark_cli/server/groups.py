"""The one way dspark stops a child it started in its own process group (a server, its
watchdog, a load generator, a kubectl stream): SIGTERM to the whole group, SIGKILL to the group
and every straggler after a grace, then say who is left. Standard library and psutil only: the
watchdog (`watchdog.py`) imports it at its start."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

KILL_WAIT_S = 5.0  # after SIGKILL: how long the kernel may take to end the group
POLL_S = 0.05


@dataclass(frozen=True)
class Stopped:
    # what ended it: "exited" (already gone), "SIGTERM" or "SIGKILL"
    signal: str
    leftover_pids: tuple[int, ...]


def group_members(pgid: int) -> set[int]:
    """Every process whose process group is `pgid`."""
    members = set()
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid:
                members.add(proc.pid)
        except (ProcessLookupError, PermissionError):
            continue
    return members


def descendants(pid: int) -> set[int]:
    """`pid`'s children, theirs, and so on (those that left its group included)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    return set()


def alive(pids: Iterable[int]) -> set[int]:
    """Those of `pids` that still run (a zombie has ended: only its parent's wait is left)."""
    left = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.add(pid)
        except psutil.NoSuchProcess:
            continue
    return left


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_group(pgid: int, grace: float, also: Iterable[int] = (),
               spare: int | None = None) -> Stopped:
    """SIGTERM to group `pgid`, SIGKILL to it and to each straggler once `grace` seconds pass
    with any of its members (or of `also`: descendants that left it) alive. `spare` is a member
    not waited for (the watchdog calling this on its own group; the SIGKILL ends it too)."""
    start = time.monotonic()
    pids = (group_members(pgid) | {pgid} | set(also)) - {spare}
    how = "exited"
    if alive(pids):
        how = "SIGTERM"
        _signal_group(pgid, signal.SIGTERM)
        while alive(pids) and time.monotonic() - start < grace:
            time.sleep(POLL_S)
    if alive(pids):
        how = "SIGKILL"
        _signal_group(pgid, signal.SIGKILL)
        for pid in alive(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(POLL_S)
    return Stopped(how, tuple(sorted(alive(pids))))
