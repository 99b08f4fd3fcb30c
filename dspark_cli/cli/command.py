"""What a `dspark <command>` module gives the command line: one `COMMAND = Command(...)` at its
bottom, read by the steps before it runs (pipeline.py), the help (help.py) and Hydra's app
(hydra_app.py). The one-line summary `dspark --help` lists stays in the registry (registry.py),
so that listing the commands imports none of them."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    """One command's contract with the dispatcher.

    `run(cfg, opts)` takes the composed config as the schema's dataclasses and the parsed
    flags, and returns the exit code; a command with no `config` composes nothing (no Hydra):
    its `cfg` is None. `needs_machine` says whether, given no `+hw`, the hardware profile
    is detected on this machine: a plain answer, or one that depends on the flags (`bench
    --report` merges files and needs no hardware)."""

    name: str
    examples: tuple[tuple[str, str], ...]  # (command line, why), the seed's job first
    add_arguments: Callable[[argparse.ArgumentParser], None]  # the command's own flags
    run: Callable[[Any, argparse.Namespace], int]
    config: str | None = None  # the primary config it composes (conf/<config>.yaml)
    needs_machine: bool | Callable[[argparse.Namespace], bool] = False
    # Stores the one primary schema `config` composes when it has its own (None: the shared
    # launch schema, which serve, env and verify-checkpoint compose): compose.store_schema.
    store_schema: Callable[[], None] | None = None
    # The config groups its help lists when it reads only these (None: every group composed).
    groups: tuple[str, ...] | None = None

    def detects_hardware(self, opts: argparse.Namespace) -> bool:
        """Whether a run with these flags and no `+hw` detects this machine's profile."""
        if callable(self.needs_machine):
            return bool(self.needs_machine(opts))
        return self.needs_machine

