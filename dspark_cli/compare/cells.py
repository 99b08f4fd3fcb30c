"""Run B over run A, per arm and concurrency (pure): the ratio of mean output throughput (and
of goodput, when both runs measured it under the same objectives) with its interval, judged by
the bench's own verdicts, so "slower" means what it means in a summary.

The gate is a contract, not a summary of what happened to be comparable: it fails when a cell
got slower beyond the caller's margin, when B has no valid measurement of a cell A measured
validly (B's cell missing, or every repeat of it invalid), when a ratio cannot be judged, and
when the runs share no cell at all.

Run B's cold start over run A's is judged here too, per arm: the median of the cells' recorded
`cold_start.boot_s` (launch to health, bench/cell.py), B over A. A growth beyond the caller's
boot margin is a flag among compare's findings, never a gate failure: a slower boot costs
minutes per deploy, not throughput, and one run's boots vary with caches a gate cannot see."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean, median
from typing import Any

from dspark_cli.bench import stats
from dspark_cli.bench.protocol import variant
from dspark_cli.errors import UsageError

METRICS = ("output_throughput", "output_goodput")


@dataclass(frozen=True)
class CellChange:
    arm: str
    concurrency: int
    metric: str
    result: stats.Speedup | None  # B over A; None: not judged (`note` says why)
    note: str = ""
    fails: bool = False  # not judged, and A measured it: the gate cannot pass over it

    @property
    def slower(self) -> bool:
        return self.result is not None and self.result.verdict is stats.Verdict.SLOWER

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "concurrency": self.concurrency, "metric": self.metric,
                "ratio": None if self.result is None else self.result.ratio.to_dict(),
                "verdict": None if self.result is None else str(self.result.verdict),
                "mde": None if self.result is None else self.result.mde, "note": self.note,
                "fails_gate": self.slower or self.fails}


def _values(result: Mapping[str, Any], metric: str) -> list[float]:
    """The valid repeats' numbers of one (recomputed) summary result."""
    raw = result.get("throughputs") if metric == "output_throughput" else \
        (result.get("goodput") or {}).get("output_goodputs")
    return [float(v) for v in raw or () if isinstance(v, int | float) and not isinstance(v, bool)
            and math.isfinite(v)]


def _results(summary: Mapping[str, Any]) -> dict[tuple[str, int], Mapping[str, Any]]:
    out = {}
    for r in summary.get("results") or ():
        if isinstance(r, Mapping) and isinstance(r.get("concurrency"), int):
            out[(str(r.get("arm")), int(r["concurrency"]))] = r
    return out


def _finite(s: stats.Speedup) -> bool:
    iv = s.ratio
    return all(v is None or math.isfinite(v) for v in (iv.estimate, iv.low, iv.high, s.mde))


def _one(key: tuple[str, int], metric: str, va: list[float], vb: list[float],
         margin: float) -> CellChange:
    a_ok, b_ok = bool(va) and fmean(va) > 0, bool(vb)
    if not a_ok:  # nothing of A's to hold B to: B cannot have got slower than nothing
        return CellChange(*key, metric, None, "no valid repeat in A")
    if not b_ok:
        return CellChange(*key, metric, None, "no valid repeat in B (A has one)", fails=True)
    try:
        found = stats.speedup("B", vb, "A", va, key[1], margin)
    except (ArithmeticError, ValueError):
        found = None
    if found is None or not _finite(found):
        return CellChange(*key, metric, None, "B/A cannot be computed from these numbers "
                          "(out of range)", fails=True)
    return CellChange(*key, metric, found)


def compare(a: Mapping[str, Any], b: Mapping[str, Any], margin: float,
            goodput: bool) -> tuple[CellChange, ...]:
    """Every (arm, concurrency) of A, in A's order, B over A (a cell only B has is not judged:
    `only_in_one` lists it)."""
    ra, rb = _results(a), _results(b)
    out = []
    for key in ra:
        for metric in METRICS if goodput else METRICS[:1]:
            va = _values(ra[key], metric)
            if key not in rb:
                if va:
                    out.append(CellChange(*key, metric, None, "not in B (A measured it)",
                                          fails=True))
                continue
            out.append(_one(key, metric, va, _values(rb[key], metric), margin))
    return tuple(out)


def only_in_one(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, list[str]]:
    """The cells one run has and the other does not ("arm c<concurrency>")."""
    ra, rb = _results(a), _results(b)
    return {"a": [f"{k[0]} c{k[1]}" for k in ra if k not in rb],
            "b": [f"{k[0]} c{k[1]}" for k in rb if k not in ra]}


def judged(found: Sequence[CellChange]) -> list[CellChange]:
    """The cells that were set against each other (both runs had valid repeats)."""
    return [c for c in found if c.result is not None]


def failures(found: Sequence[CellChange]) -> list[str]:
    """Why the gate fails ([] when it passes): each slower or unjudged cell, or no cell
    compared at all."""
    out = [f"{c.arm} c{c.concurrency} ({c.metric}): "
           + (f"slower ({c.result.ratio.estimate:.3f}x)" if c.slower and c.result else c.note)
           for c in found if c.slower or c.fails]
    if not judged(found):
        out.append("no cell of A was measured validly in both runs: nothing was compared")
    return out


def gate(found: Sequence[CellChange]) -> bool:
    """True when every cell A measured was measured by B, none got slower beyond the
    margin, and at least one was compared."""
    return not failures(found)


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
