"""Slow checks run beside the boot, and calls raced against the server's life."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

from dspark_cli.smoke.observations import CheckResult
from dspark_cli.status import Status

POLL_S = 0.02


def in_thread(fn: Callable[[], Any], name: str) -> futures.Future[Any]:
    """`fn()` in a daemon thread, as a Future. Not an executor: its threads are joined at exit,
    and an abandoned call (a server that never answers) must end with the process."""
    future: futures.Future[Any] = futures.Future()

    def target() -> None:
        try:
            future.set_result(fn())
        except Exception as exc:  # reported to whoever reads the future
            future.set_exception(exc)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


class BackgroundCheck:
    """A slow pre-launch check run beside the boot instead of before it (vLLM's own parser
    takes 5-10 s on 2 cores); a rejection stops the boot as a fatal line would."""

    def __init__(self, name: str, fn: Callable[[], tuple[bool, str]]) -> None:
        self.name = name
        self._future = in_thread(fn, f"dspark-{name}")

    def _outcome(self) -> tuple[bool, str]:
        """(passed, message), waiting for the check; a crashed check proves nothing: failed."""
        exc = self._future.exception()
        return (False, f"{type(exc).__name__}: {exc}") if exc else self._future.result()

    def rejection(self) -> str | None:
        """The failure message once the check has failed; None while running or passed."""
        if not self._future.done():
            return None
        ok, message = self._outcome()
        return None if ok else message

    def result(self) -> CheckResult:
        ok, message = self._outcome()
        return CheckResult(self.name, Status.passed if ok else Status.failed, message)


def race(fn: Callable[[], Any], timeout: float,
         interrupt: Callable[[], str | None]) -> tuple[str, Any]:
    """Run `fn` in a thread; ("done", value) | ("error", exc) | ("interrupted", reason) |
    ("timeout", None), whichever comes first. An abandoned call ends with the server."""
    future = in_thread(fn, "dspark-smoke-call")
    deadline = time.monotonic() + timeout
    while not futures.wait([future], POLL_S).done:
        reason = interrupt()
        if reason:
            return "interrupted", reason
        if time.monotonic() > deadline:
            return "timeout", None
    exc = future.exception()
    return ("error", exc) if exc else ("done", future.result())
