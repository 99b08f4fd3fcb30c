"""Two run directories read back (through the report's record readers: untrusted input, nothing
outside them followed, summaries recomputed from the cells) and compared: refused when they do
not belong together (another protocol, model, request set, sampling or warmups), else what
changed and every cell's ratio B/A with its verdict, under the caller's margin."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_cli.compare.boot import (
    DEFAULT_BOOT_MARGIN,
    BootChange,
    boot_changes,
    check_boot_margin,
    flags,
)
from dspark_cli.compare.cells import CellChange, compare, failures, gate, only_in_one
from dspark_cli.compare.changes import Change, changes
from dspark_cli.errors import UsageError
from dspark_cli.launch.secrets import redact_text
from dspark_cli.report.sources import BenchRecords, collect, lookup
from dspark_cli.untrusted import printable, shown_path

DEFAULT_MARGIN = 0.05  # README: `dspark compare --margin`


@dataclass(frozen=True)
class Comparison:
    a: Path
    b: Path
    protocol: str
    margin: float  # the caller's (`--margin`), never a record's
    changes: tuple[Change, ...]
    cells: tuple[CellChange, ...]
    only: dict[str, list[str]]
    boot: tuple[BootChange, ...] = ()  # cold start per arm: flagged, never gated
    boot_margin: float = DEFAULT_BOOT_MARGIN

    @property
    def flags(self) -> list[str]:
        return flags(self.boot)

    @property
    def failures(self) -> list[str]:
        return failures(self.cells)

    @property
    def passed(self) -> bool:
        return gate(self.cells)

    def to_dict(self) -> dict[str, Any]:
        return {"a": shown_path(self.a), "b": shown_path(self.b), "protocol": self.protocol,
                "margin": self.margin, "passed": self.passed,
                "slower": [f"{c.arm} c{c.concurrency} {c.metric}" for c in self.cells
                           if c.slower],
                "failures": self.failures, "boot_margin": self.boot_margin,
                "flags": self.flags, "cold_start": [c.to_dict() for c in self.boot],
                "changes": [c.to_dict() for c in self.changes],
                "cells": [c.to_dict() for c in self.cells], "only_in": self.only}


def check_margin(margin: float) -> float:
    """The caller's equivalence margin, a fraction in [0, 1); UsageError (exit 2) otherwise."""
    if not 0 <= margin < 1:  # NaN fails too
        raise UsageError(f"--margin {margin!r} is out of range: the equivalence margin is a "
                         "fraction from 0 (inclusive) to 1 (exclusive), e.g. 0.05 for 5%; "
                         "nothing was compared.", hint="dspark compare A B --margin 0.05")
    return float(margin)


def _bench(directory: Path) -> BenchRecords:
    bench = collect([directory]).bench
    if bench is None or bench.summary is None:
        raise UsageError(f"{shown_path(directory)} holds no bench cells (cells/*/cell.json); "
                         "a comparison sets two bench runs against each other.",
                         hint="give two `dspark bench` or `dspark validate` run directories")
    return bench


def _recorded(cell: Mapping[str, Any], *path: str) -> str | None:
    value = lookup(cell, *path)
    return value if isinstance(value, str) else None


def _models(bench: BenchRecords) -> set[str]:
    """The models the run's arms were composed for and its cells measured."""
    found = {str(m) for c in bench.arm_configs.values()
             if (m := lookup(c, "model", "path")) is not None}
    return found | {m for c in bench.cells if (m := _recorded(c, "launch", "plan", "model_path"))}


def _requests(bench: BenchRecords) -> set[str]:
    """The request sets the run's cells measured (the dataset's sha256, else its file)."""
    return {d for c in bench.cells
            if (d := _recorded(c, "dataset", "sha256") or _recorded(c, "dataset", "file"))}


def _listed(values: set[str]) -> str:
    return ", ".join(sorted(values)) or "none recorded"


def _refuse_apart(a: BenchRecords, b: BenchRecords) -> None:
    """UsageError naming why two runs' numbers cannot be set against each other."""
    sa, sb = a.summary or {}, b.summary or {}
    why = []
    if sa.get("protocol") != sb.get("protocol"):
        why.append(f"different protocols ({sa.get('protocol')!r} and {sb.get('protocol')!r})")
    if _models(a) != _models(b):
        why.append(f"different models ({_listed(_models(a))} and {_listed(_models(b))})")
    if _requests(a) != _requests(b):
        why.append(f"different request sets (datasets {_listed(_requests(a))} and "
                   f"{_listed(_requests(b))})")
    for key in ("sampling", "dataset", "measured_prompts", "warmups"):
        pa = [lookup(c, "bench", key) for c in a.arm_configs.values()][:1]
        pb = [lookup(c, "bench", key) for c in b.arm_configs.values()][:1]
        if pa and pb and pa != pb:
            why.append(f"a different bench.{key} ({pa[0]} and {pb[0]})")
    if why:
        raise UsageError(printable(redact_text(
            f"{shown_path(a.directory)} and {shown_path(b.directory)} do not belong together: "
            f"{'; '.join(why)}; a comparison sets one protocol on one model and one request "
            "set against itself.")),
                         hint="compare two runs of the same protocol, model and dataset")


def compare_runs(a_dir: Path, b_dir: Path, margin: float = DEFAULT_MARGIN,
                 boot_margin: float = DEFAULT_BOOT_MARGIN) -> Comparison:
    margin, boot_margin = check_margin(margin), check_boot_margin(boot_margin)
    a, b = _bench(a_dir), _bench(b_dir)
    _refuse_apart(a, b)
    sa, sb = a.summary or {}, b.summary or {}
    goodput = sa.get("objectives") is not None and sa.get("objectives") == sb.get("objectives")
    return Comparison(a.directory, b.directory, str(sa.get("protocol")), margin,
                      changes(a, b), compare(sa, sb, margin, goodput), only_in_one(sa, sb),
                      boot_changes(a.cells, b.cells, boot_margin), boot_margin)
