"""A vendor GPU tool (`nvidia-smi`, `amd-smi`, `rocm-smi`) asked once, bounded: its answer is
read for at most `timeout` seconds and `limit` bytes, and the tool's whole process group is
killed when it runs past either (a hung driver, a wrapper script whose child holds the pipe, a
tool that prints without end). What it prints is untrusted: bytes, decoded by the caller."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence

LIMIT = 1 << 20  # bytes of one answer (a node's 8 GPUs answer in about 2 KiB)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def ask(argv: Sequence[str], timeout: float, limit: int = LIMIT) -> bytes | None:
    """The tool's stdout when it exits 0 within `timeout` seconds having printed at most
    `limit` bytes; None when it is not on PATH, cannot start, fails, hangs or floods."""
    if not shutil.which(argv[0]):
        return None
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
    deadline = time.monotonic() + timeout
    out = bytearray()
    with proc:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                _kill(proc)
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            out += chunk
            if len(out) > limit:
                _kill(proc)
                return None
        try:
            code = proc.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            _kill(proc)
            return None
    return bytes(out) if code == 0 else None
