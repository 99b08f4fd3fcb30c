"""Output for people: progress lines on stderr, flushed, so they interleave with server output;
how much a command says (`-v`); and rich tables that stay whole in a log."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported where a table is printed
    from rich.console import Console

_VERBOSE = [False]
# Outside a terminal (a file, a pipe, CI) a table is as wide as its longest cell needs, up to
# this: a code or key cut in two at 80 columns cannot be searched for in a log.
LOG_WIDTH = 4096


def json_text(data: object, sort_keys: bool = False) -> str:
    """The one JSON form dspark prints (`--json`) and writes (records): two-space indent, a
    final newline."""
    return json.dumps(data, indent=2, sort_keys=sort_keys) + "\n"


def print_json(data: object, sort_keys: bool = False) -> None:
    """A command's `--json` answer on stdout. As `print` does, the newline is a write of its
    own: a pipe closed early (`| head -1`) cuts the one large write short without an error,
    and only the next write raises BrokenPipeError (the exit code says the reader went away)."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=sort_keys))
    sys.stdout.write("\n")


def progress(message: str) -> None:
    """A progress line on stderr; none once the terminal is gone (a hangup: the teardown that
    follows must not fail on a write)."""
    with contextlib.suppress(OSError):
        print(f"dspark: {message}", file=sys.stderr, flush=True)


def set_verbose(on: bool) -> None:
    """The command line's `-v`, set once at the command's edge."""
    _VERBOSE[0] = bool(on)


def verbose() -> bool:
    """Whether to say the details a plain run leaves out (each preflight rule not checked)."""
    return _VERBOSE[0]


def output(stderr: bool = False) -> Console:
    """A rich console for results: a terminal's width in a terminal; elsewhere wide enough that
    no cell is wrapped, so every code and key stays on one line."""
    from rich.console import Console

    console = Console(stderr=stderr, soft_wrap=False)
    if console.is_terminal:
        return console
    return Console(stderr=stderr, soft_wrap=False, width=LOG_WIDTH)
