"""A fake host for hardware detection: an `nvidia-smi` script in a directory to put first on
PATH, printing what the real one prints for dspark's query, and an empty KFD topology so this
machine's own sysfs cannot make it look ROCm."""

from __future__ import annotations

import os
import shlex
import stat
import sys
from pathlib import Path

# `nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap
#  --format=csv,noheader,nounits` on each host; None: the tool is there, the driver is not.
HOSTS: dict[str, str | None] = {
    "a100": "0, NVIDIA A100-SXM4-80GB, 81920, 550.54.15, 8.0\n",
    "h200x8": "".join(f"{i}, NVIDIA H200, 143771, 570.86.15, 9.0\n" for i in range(8)),
    "no-gpu": None,
}
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.")


def fake_host(directory: Path, host: str, calls: Path | None = None) -> dict[str, str]:
    """Write the host's `nvidia-smi` into `directory` (appending its argv to `calls`, when
    given, on every call) and return the env that makes dspark see that host."""
    directory.mkdir(parents=True, exist_ok=True)
    output = HOSTS[host]
    lines = ["#!/bin/sh"]
    if calls is not None:
        lines.append(f'echo "$*" >> {shlex.quote(str(calls))}')
    if output is None:
        lines += [f"echo {shlex.quote(NO_DRIVER)}", "exit 9"]
    else:
        lines.append(f"printf '%s' {shlex.quote(output)}")
    script = directory / "nvidia-smi"
    script.write_text("\n".join(lines) + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (directory / "kfd-nodes").mkdir(exist_ok=True)
    return {"PATH": f"{directory}{os.pathsep}{os.environ.get('PATH', '')}",
            "DSPARK_KFD_NODES": str(directory / "kfd-nodes")}


def fake_sampling_host(directory: Path, host: str = "h200x8", *options: str) -> dict[str, str]:
    """Like `fake_host`, with an `nvidia-smi` that also samples (tests/doubles/
    fake_nvidia_smi.py, a real process looping with -lms); `options` are the double's own
    (--util 0=95,1=3, --throttle 1=0x40, --no-throttle-field)."""
    env = fake_host(directory, host)
    script = directory / "nvidia-smi"
    double = Path(__file__).resolve().parent / "doubles" / "fake_nvidia_smi.py"
    argv = " ".join(shlex.quote(a) for a in [sys.executable, str(double), "--host", host,
                                              *options])
    script.write_text(f'#!/bin/sh\nexec {argv} -- "$@"\n')
    return env
