"""Two run directories read back (through the report's record readers: untrusted input, nothing
outside them followed) and compared: refused when they do not belong together, else what
changed and every shared cell's ratio B/A with its verdict."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_cli.compare.cells import CellChange, compare, gate, only_in_one
from dspark_cli.compare.changes import Change, changes
from dspark_cli.errors import UsageError
from dspark_cli.report.sources import BenchRecords, collect, lookup


@dataclass(frozen=True)
class Comparison:
    a: Path
    b: Path
    protocol: str
    margin: float
    changes: tuple[Change, ...]
    cells: tuple[CellChange, ...]
    only: dict[str, list[str]]

    @property
    def passed(self) -> bool:
        return gate(self.cells)

    def to_dict(self) -> dict[str, Any]:
        return {"a": str(self.a), "b": str(self.b), "protocol": self.protocol,
                "margin": self.margin, "passed": self.passed,
                "slower": [f"{c.arm} c{c.concurrency} {c.metric}" for c in self.cells
                           if c.slower],
                "changes": [c.to_dict() for c in self.changes],
                "cells": [c.to_dict() for c in self.cells], "only_in": self.only}


def _bench(directory: Path) -> BenchRecords:
    bench = collect([directory]).bench
    if bench is None or bench.summary is None:
        raise UsageError(f"{directory} holds no bench summary (summary.json beside its cells).",
                         hint="give two `dspark bench` or `dspark validate` run directories "
                         "(`dspark bench --report DIR` writes a missing summary)")
    return bench


def _models(bench: BenchRecords) -> set[str]:
    return {str(m) for c in bench.arm_configs.values()
            if (m := lookup(c, "model", "path")) is not None}


def _refuse_apart(a: BenchRecords, b: BenchRecords) -> None:
    """UsageError naming why two runs' numbers cannot be set against each other."""
    sa, sb = a.summary or {}, b.summary or {}
    why = []
    if sa.get("protocol") != sb.get("protocol"):
        why.append(f"different protocols ({sa.get('protocol')!r} and {sb.get('protocol')!r})")
    if _models(a) != _models(b):
        why.append(f"different models ({', '.join(sorted(_models(a)))} and "
                   f"{', '.join(sorted(_models(b)))})")
    for key in ("sampling", "dataset", "measured_prompts", "warmups"):
        pa = [lookup(c, "bench", key) for c in a.arm_configs.values()][:1]
        pb = [lookup(c, "bench", key) for c in b.arm_configs.values()][:1]
        if pa and pb and pa != pb:
            why.append(f"a different bench.{key} ({pa[0]} and {pb[0]})")
    if why:
        raise UsageError(f"{a.directory} and {b.directory} do not belong together: "
                         f"{'; '.join(why)}; a comparison sets one protocol on one model "
                         "against itself.", hint="compare two runs of the same protocol and model")


def compare_runs(a_dir: Path, b_dir: Path) -> Comparison:
    a, b = _bench(a_dir), _bench(b_dir)
    _refuse_apart(a, b)
    sa, sb = a.summary or {}, b.summary or {}
    margin = max(float(sa.get("equivalence_margin") or 0.05),
                 float(sb.get("equivalence_margin") or 0.05))
    goodput = sa.get("objectives") is not None and sa.get("objectives") == sb.get("objectives")
    return Comparison(a.directory, b.directory, str(sa.get("protocol")), margin,
                      changes(a, b), compare(sa, sb, margin, goodput), only_in_one(sa, sb))
