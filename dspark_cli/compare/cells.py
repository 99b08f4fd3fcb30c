"""Run B over run A, per arm and concurrency present in both (pure): the ratio of mean output
throughput (and of goodput, when both runs measured it under the same objectives) with its
interval, judged by the bench's own verdicts, so "slower" means what it means in a summary."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from dspark_cli.bench import verdicts

METRICS = ("output_throughput", "output_goodput")


@dataclass(frozen=True)
class CellChange:
    arm: str
    concurrency: int
    metric: str
    result: verdicts.Speedup | None  # B over A; None: a side has no valid repeat
    note: str = ""

    @property
    def slower(self) -> bool:
        return self.result is not None and self.result.verdict is verdicts.Verdict.SLOWER

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "concurrency": self.concurrency, "metric": self.metric,
                "ratio": None if self.result is None else self.result.ratio.to_dict(),
                "verdict": None if self.result is None else str(self.result.verdict),
                "mde": None if self.result is None else self.result.mde, "note": self.note}


def _values(result: Mapping[str, Any], metric: str) -> list[float]:
    """The valid repeats' numbers of one summary result (untrusted: non-numbers dropped)."""
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


def compare(a: Mapping[str, Any], b: Mapping[str, Any], margin: float,
            goodput: bool) -> tuple[CellChange, ...]:
    """Every (arm, concurrency) of both summaries, in A's order, B over A."""
    ra, rb = _results(a), _results(b)
    out = []
    for key in [k for k in ra if k in rb]:
        for metric in METRICS if goodput else METRICS[:1]:
            va, vb = _values(ra[key], metric), _values(rb[key], metric)
            if not va or not vb or fmean(va) <= 0:
                out.append(CellChange(*key, metric, None, "no valid repeat in "
                                      + ("A" if not va or fmean(va) <= 0 else "B")))
                continue
            out.append(CellChange(*key, metric,
                                  verdicts.speedup("B", vb, "A", va, key[1], margin)))
    return tuple(out)


def only_in_one(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, list[str]]:
    """The cells one run has and the other does not ("arm c<concurrency>")."""
    ra, rb = _results(a), _results(b)
    return {"a": [f"{k[0]} c{k[1]}" for k in ra if k not in rb],
            "b": [f"{k[0]} c{k[1]}" for k in rb if k not in ra]}


def gate(found: Sequence[CellChange]) -> bool:
    """True when no cell got slower beyond the margin."""
    return not any(c.slower for c in found)
