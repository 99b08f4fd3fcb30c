"""Progress for people: one line to stderr, flushed, so it interleaves with server output."""

from __future__ import annotations

import sys


def progress(message: str) -> None:
    print(f"dspark: {message}", file=sys.stderr, flush=True)
