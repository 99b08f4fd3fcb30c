"""The rows of a bench summary: one cell (a repeat), one arm at one concurrency over its
repeats, and one speedup with its verdict. Frozen, with the dict each writes into summary.json;
`summary.py` computes them from the cell records."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dspark_cli.bench import goodput as gp
from dspark_cli.bench import stats, verdicts

Latency = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class CellRow:
    """One cell record: one repeat of one arm at one concurrency."""

    arm: str
    concurrency: int
    repeat: int
    cell_id: str
    valid: bool
    reasons: tuple[str, ...]
    output_throughput: float | None
    request_throughput: float | None
    total_output_tokens: int | None
    acceptance_length: float | None
    accepted_per_draft: float | None
    latency_ms: Latency
    boot_s: float | None
    speedup: float | None  # its arm's ratio of means over the baseline at this concurrency
    lossless: Mapping[str, Any] | None = None  # the record's greedy answers
    degraded: tuple[str, ...] = ()  # lines where vLLM overrode what was asked (still valid)
    lossless_check: Mapping[str, Any] | None = None  # their comparison with the reference's
    goodput: gp.Goodput | None = None  # under the protocol's objectives

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "concurrency": self.concurrency, "repeat": self.repeat,
                "cell_id": self.cell_id, "valid": self.valid, "reasons": list(self.reasons),
                "output_throughput": self.output_throughput,
                "request_throughput": self.request_throughput,
                "total_output_tokens": self.total_output_tokens,
                "acceptance_length": self.acceptance_length,
                "accepted_per_draft": self.accepted_per_draft,
                "latency_ms": plain_latency(self.latency_ms), "boot_s": self.boot_s,
                "speedup": self.speedup, "lossless": self.lossless_check,
                "degraded": list(self.degraded),
                "goodput": None if self.goodput is None else self.goodput.to_dict()}


@dataclass(frozen=True)
class ArmResult:
    """One arm at one concurrency over its valid repeats."""

    arm: str
    concurrency: int
    repeats: tuple[int, ...]  # the repeats recorded, valid or not
    throughputs: tuple[float, ...]  # the valid repeats' output throughput, in repeat order
    invalid: int  # how many recorded repeats are invalid
    throughput: stats.Interval | None  # None: no valid repeat
    acceptance_length: float | None  # means over the valid repeats
    accepted_per_draft: float | None
    latency_ms: Latency  # each percentile's mean over the valid repeats
    goodput: gp.GoodputResult | None = None  # None: no objective (or no valid repeat)

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "concurrency": self.concurrency,
                "goodput": None if self.goodput is None else self.goodput.to_dict(),
                "repeats": list(self.repeats), "throughputs": list(self.throughputs),
                "invalid_repeats": self.invalid,
                "throughput": None if self.throughput is None else self.throughput.to_dict(),
                "acceptance_length": self.acceptance_length,
                "accepted_per_draft": self.accepted_per_draft,
                "latency_ms": plain_latency(self.latency_ms)}


@dataclass(frozen=True)
class SpeedupRow:
    """A non-baseline arm at one concurrency: its speedup, or why there is none."""

    arm: str
    baseline: str
    concurrency: int
    result: verdicts.Speedup | None
    note: str  # why there is no speedup, or what it leaves out; "" when nothing to say

    @property
    def speedup(self) -> float | None:
        return None if self.result is None else self.result.ratio.estimate

    @property
    def verdict(self) -> verdicts.Verdict:
        return verdicts.Verdict.INCONCLUSIVE if self.result is None else self.result.verdict

    def to_dict(self) -> dict[str, Any]:
        if self.result is not None:
            return {**self.result.to_dict(), "speedup": self.speedup, "note": self.note}
        return {"arm": self.arm, "baseline": self.baseline, "concurrency": self.concurrency,
                "ratio": None, "verdict": str(self.verdict), "margin": None,
                "equivalence": None, "mde": None, "speedup": None, "note": self.note}


def plain_latency(latency: Latency) -> dict[str, dict[str, float]]:
    return {m: dict(ps) for m, ps in latency.items()}


