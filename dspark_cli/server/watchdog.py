"""A process group's watchdog and teardown: `python -m dspark_cli.server.watchdog FD GRACE --
ARGV`, and the one way dspark stops a group (`stop_group`).

dspark starts every long-running child (a server node, a load generator, a kubectl stream)
through this wrapper (`popen()`), as the leader of a new process group; the wrapper runs ARGV as
its child in that group and mirrors its exit. FD is the read end of a pipe whose only write end
dspark holds for its whole life and never writes: when dspark dies in any way (SIGKILL, the OOM
killer, a crash), the kernel closes it, the wrapper reads end-of-file and tears the whole group
down (SIGTERM, SIGKILL after GRACE seconds) without dspark's help. A pipe, not
PR_SET_PDEATHSIG: that fires when the *thread* that started the child ends, which in a threaded
supervisor is not when the process dies. A change of parent (reparented to init or a
subreaper) counts as the same death, should the pipe ever be inherited elsewhere.

Signals dspark sends the group (SIGTERM, SIGINT, SIGHUP, SIGKILL) reach the server directly; the
wrapper only outlives them until its child is gone, then exits as the child did (the same code,
or killed by the same signal), so dspark sees the server's own exit.

`stop_group`: SIGTERM to the whole group, SIGKILL to the group and every straggler after a
grace, then say who is left. Standard library and psutil only: the wrapper imports this module
at its start.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

CHECK_PARENT_S = 0.5
CANNOT_START = 127  # as a shell says for a command it cannot run


_lifeline: list[int] = []  # this process's pipe (read end, write end), made on first use


def command(argv: Sequence[str], lifeline_fd: int, grace: float) -> list[str]:
    """The argv that runs `argv` under the watchdog (FD passed to it with `pass_fds`)."""
    return [sys.executable, "-m", "dspark_cli.server.watchdog", str(lifeline_fd), repr(grace),
            "--", *argv]


def popen(argv: Sequence[str], grace: float, **kwargs: Any) -> subprocess.Popen[Any]:
    """Start `argv` under a watchdog, the leader of a new session and process group
    (`kwargs` as for Popen: output, env...). One pipe serves every watchdog of this process;
    both its ends are close-on-exec, and only the read end is passed on."""
    if not _lifeline:
        _lifeline.extend(os.pipe())
    return subprocess.Popen(command(argv, _lifeline[0], grace), start_new_session=True,
                            pass_fds=(_lifeline[0],), **kwargs)


def _ignore(_signum: int, _frame: object) -> None:
    """A handler, not SIG_IGN: handled signals are reset to their default in the child at exec,
    ignored ones would stay ignored there."""


def _exit_as(code: int) -> None:
    if code < 0:  # killed by a signal: die of the same one, so the supervisor reads the same
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def watch(lifeline_fd: int, grace: float, argv: Sequence[str]) -> int:
    """Run `argv`; its exit code, or tear the group down once the supervisor is gone."""
    parent = os.getppid()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    try:
        child = subprocess.Popen(list(argv))
    except OSError as e:
        print(f"dspark: could not start {argv[0]!r}: {e.strerror or e}", file=sys.stderr)
        return CANNOT_START
    pidfd = os.pidfd_open(child.pid) if hasattr(os, "pidfd_open") else None
    watched = [lifeline_fd] + ([pidfd] if pidfd is not None else [])
    while child.poll() is None:
        timeout = CHECK_PARENT_S if pidfd is not None else 0.05
        try:
            ready, _, _ = select.select(watched, [], [], timeout)
        except InterruptedError:
            continue
        orphaned = os.getppid() != parent
        if lifeline_fd in ready and not os.read(lifeline_fd, 1):
            orphaned = True
        if orphaned and child.poll() is None:
            stop_group(os.getpgid(0), grace, descendants(os.getpid()), spare=os.getpid())
            child.wait()
            return 0
    return child.returncode


def main(args: Sequence[str]) -> None:
    if len(args) < 4 or args[2] != "--":
        sys.exit(f"usage: python -m dspark_cli.server.watchdog FD GRACE -- ARGV (got {args!r})")
    _exit_as(watch(int(args[0]), float(args[1]), args[3:]))


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


if __name__ == "__main__":
    main(sys.argv[1:])
