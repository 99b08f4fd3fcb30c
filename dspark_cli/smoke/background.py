"""Slow checks run beside the boot, and calls raced against the server's life."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from dspark_cli.smoke.checks import CheckResult
from dspark_cli.status import Status

POLL_S = 0.02


class BackgroundCheck:
    """A slow pre-launch check run beside the boot instead of before it (vLLM's own parser
    takes 5-10 s on 2 cores); a rejection stops the boot as a fatal line would."""

    def __init__(self, name: str, fn: Callable[[], tuple[bool, str]]) -> None:
        self.name = name
        self._box: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(fn,), name=f"dspark-{name}",
                                        daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], tuple[bool, str]]) -> None:
        try:
            self._box["result"] = fn()
        except Exception as exc:  # a crashed check proves nothing: fail closed
            self._box["result"] = (False, f"{type(exc).__name__}: {exc}")

    def rejection(self) -> str | None:
        """The failure message once the check has failed; None while running or passed."""
        ok, message = self._box.get("result", (True, ""))
        return None if ok else message

    def result(self) -> CheckResult:
        self._thread.join()
        ok, message = self._box["result"]
        return CheckResult(self.name, Status.passed if ok else Status.failed, message)


def race(fn: Callable[[], Any], timeout: float,
         interrupt: Callable[[], str | None]) -> tuple[str, Any]:
    """Run `fn` in a thread; ("done", value) | ("error", exc) | ("interrupted", reason) |
    ("timeout", None), whichever comes first. An abandoned call ends with the server."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except Exception as exc:  # reported to the caller, which decides
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="dspark-smoke-call", daemon=True).start()
    deadline = time.monotonic() + timeout
    while not done.wait(POLL_S):
        reason = interrupt()
        if reason:
            return "interrupted", reason
        if time.monotonic() > deadline:
            return "timeout", None
    return ("error", box["error"]) if "error" in box else ("done", box["value"])
