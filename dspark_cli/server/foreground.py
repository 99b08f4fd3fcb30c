"""`dspark serve`'s action: a managed session in the foreground until the server exits or we
are told to stop. SIGINT/SIGTERM go to the server's process groups (a SIGHUP, from a closed
terminal or a dropped ssh session, as SIGTERM; a second signal kills them), and the session's
teardown makes sure no process is left. A deployment an engine places (Slurm,
Kubernetes) is followed until it ends; a signal cancels it, and dspark waits until the engine
says it is gone."""

from __future__ import annotations

import contextlib
import signal
import sys

from dspark_cli.errors import ExitCode, ServerError
from dspark_cli.server.deployment import Deployment, Watch
from dspark_cli.server.process import STOP_SIGNALS
from dspark_cli.server.session import ServerSession


def serve(deployment: Deployment, watch: Watch, stall_exit: bool = False) -> int:
    """Run the server; exit code INTERRUPTED after a signal, ServerError when it fails or
    exits on its own. With a stall watch (`watch.stall`), a stall prints one line; with
    `stall_exit`, it also stops the server (ServerError, exit 3)."""
    received: list[int] = []
    session = ServerSession(deployment, watch,
                            echo=lambda line: print(line, file=sys.stderr, flush=True),
                            abort=lambda: "interrupted" if received else None)

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        session.signal(signal.SIGKILL if len(received) > 1
                       else signal.SIGTERM if signum == signal.SIGHUP else signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, *STOP_SIGNALS)}
    try:
        with session:
            try:
                boot = session.wait_healthy()
            except ServerError:
                if received:
                    return _stopped(session)
                raise
            stops = (f" ({deployment.describe()}); Ctrl-C cancels it" if deployment.queued
                     else "; Ctrl-C stops it")
            print(f"dspark: ready at {session.base_url} after {boot:.1f} s{stops}",
                  file=sys.stderr, flush=True)
            code, ended = _wait(session, stall_exit)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    _check_teardown(session)
    if received:
        return _stopped(session)
    if deployment.queued:
        raise ServerError(f"{ended} on its own; its output: {deployment.log_path}")
    raise ServerError(f"the server exited with code {code}; log: {deployment.log_path}")


def _wait(session: ServerSession, stall_exit: bool) -> tuple[int | None, str | None]:
    """Until the server ends (or stalls, with `stall_exit`): its exit code and why it ended."""
    while True:
        code = session.wait()
        stall = session.stalled
        if stall is None or code is not None:
            return code, session.stop_reason()
        if stall_exit:  # the one line is the error's
            raise ServerError(f"{stall.reason}; the server was stopped (watch.serve_exit)",
                              reason=stall.reason)
        print(f"dspark: {stall.reason}", file=sys.stderr, flush=True)
        if session.stall_watch is not None:  # it tripped, so it runs: watch for the next one
            session.stall_watch.rearm()


def _check_teardown(session: ServerSession) -> None:
    teardown = session.teardown
    if teardown is not None and teardown.leftover_pids:
        raise ServerError(f"processes {list(teardown.leftover_pids)} outlived the teardown")
    if teardown is not None and not teardown.deployment_gone:
        raise ServerError(f"{teardown.deployment} did not leave the engine after it was "
                          "cancelled; check it with the engine's own tools")


def _stopped(session: ServerSession) -> int:
    session.close()
    _check_teardown(session)
    with contextlib.suppress(OSError):  # a hangup may have closed the terminal
        print("dspark: stopped.", file=sys.stderr)
    return int(ExitCode.INTERRUPTED)
