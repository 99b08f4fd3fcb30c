"""Run B's cold start over run A's, per arm (pure): the median of the cells' recorded
`cold_start.boot_s` (launch to health, bench/cell.py), B over A. A growth beyond the caller's
boot margin is a flag among compare's findings, never a gate failure: a slower boot costs
minutes per deploy, not throughput, and one run's boots vary with caches a gate cannot see."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from dspark_cli.bench.protocol import variant
from dspark_cli.errors import UsageError

DEFAULT_BOOT_MARGIN = 0.25  # README: `dspark compare --boot-margin`
MAX_BOOT_MARGIN = 10.0


@dataclass(frozen=True)
class BootChange:
    arm: str
    a_s: float  # median cold_start.boot_s over the arm's cells in A
    b_s: float
    cells: tuple[int, int]  # how many cells of A and of B recorded one
    margin: float

    @property
    def growth(self) -> float | None:
        """B over A minus 1 (0.5: half again as long); None when A booted in no time."""
        return self.b_s / self.a_s - 1 if self.a_s > 0 else None

    @property
    def flagged(self) -> bool:
        return self.growth is not None and self.growth > self.margin

    def sentence(self) -> str:
        grew = "-" if self.growth is None else f"{self.growth:+.0%}"
        return (f"{self.arm}: cold start {self.a_s:.1f} s -> {self.b_s:.1f} s ({grew}; median "
                f"over {self.cells[0]} and {self.cells[1]} cells)")

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "a_boot_s": self.a_s, "b_boot_s": self.b_s,
                "a_cells": self.cells[0], "b_cells": self.cells[1],
                "growth": None if self.growth is None else round(self.growth, 4),
                "flagged": self.flagged}


def check_boot_margin(margin: float) -> float:
    """The caller's boot margin, a fraction in [0, 10]; UsageError (exit 2) otherwise."""
    if not (math.isfinite(margin) and 0 <= margin <= MAX_BOOT_MARGIN):
        raise UsageError(f"--boot-margin {margin!r} is out of range: the growth a cold start "
                         f"may show before it is flagged is a fraction from 0 to "
                         f"{MAX_BOOT_MARGIN:g}, e.g. 0.25 for 25%; nothing was compared.",
                         hint="dspark compare A B --boot-margin 0.25")
    return float(margin)


def _boots(cells: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for c in cells:
        cold = c.get("cold_start")
        boot = cold.get("boot_s") if isinstance(cold, Mapping) else None
        if isinstance(boot, int | float) and not isinstance(boot, bool):
            # a variant with prefix caching off is its own arm (`<arm>+pc-off`)
            out.setdefault(variant(str(c.get("arm")), c.get("prefix_caching") is not False),
                           []).append(float(boot))
    return out


def boot_changes(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]],
                 margin: float) -> tuple[BootChange, ...]:
    """Every arm both runs recorded a cold start of, in A's order."""
    ba, bb = _boots(a), _boots(b)
    return tuple(BootChange(arm, median(ba[arm]), median(bb[arm]),
                            (len(ba[arm]), len(bb[arm])), margin)
                 for arm in ba if arm in bb)


def flags(found: Sequence[BootChange]) -> list[str]:
    """One line per arm whose cold start grew beyond the margin."""
    return [f"{c.sentence()}: grew beyond the {c.margin:.0%} boot margin" for c in found
            if c.flagged]
