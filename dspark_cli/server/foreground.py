"""`dspark serve`'s action: a managed session in the foreground until the server exits or we
are told to stop. SIGINT/SIGTERM go to the server's process groups (a second one kills them), and
the session's teardown makes sure no process is left."""

from __future__ import annotations

import signal
import sys

from dspark_cli.errors import ExitCode, ServerError
from dspark_cli.server.session import ServerSession, Target


def serve(target: Target) -> int:
    """Run the server; exit code INTERRUPTED after a signal, ServerError when it fails or
    exits on its own."""
    received: list[int] = []
    session = ServerSession(target, echo=lambda line: print(line, file=sys.stderr, flush=True),
                            abort=lambda: "interrupted" if received else None)

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        session.signal(signal.SIGKILL if len(received) > 1 else signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with session:
            try:
                boot = session.wait_healthy()
            except ServerError:
                if received:
                    return int(ExitCode.INTERRUPTED)
                raise
            print(f"dspark: ready at {target.base_url} after {boot:.1f} s; Ctrl-C stops it",
                  file=sys.stderr, flush=True)
            code = session.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    teardown = session.teardown
    if teardown is not None and teardown.leftover_pids:
        raise ServerError(f"processes {list(teardown.leftover_pids)} outlived the teardown")
    if received:
        print("dspark: stopped.", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    raise ServerError(f"the server exited with code {code}; log: {target.log_path}")
