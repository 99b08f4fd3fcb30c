"""Progress for people: one line to stderr, flushed, so it interleaves with server output."""

from __future__ import annotations

import contextlib
import sys


def progress(message: str) -> None:
    """A progress line on stderr; none once the terminal is gone (a hangup: the teardown that
    follows must not fail on a write)."""
    with contextlib.suppress(OSError):
        print(f"dspark: {message}", file=sys.stderr, flush=True)
