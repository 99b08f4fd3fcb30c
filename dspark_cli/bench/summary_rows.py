"""The rows of a bench summary: one cell (a repeat), one arm at one concurrency over its
repeats, and one speedup with its verdict. Frozen, with the dict each writes into summary.json;
`summary.py` computes them from the cell records."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from dspark_cli.bench import goodput as gp
from dspark_cli.bench import stats, verdicts
from dspark_cli.bench.protocol import variant

Latency = Mapping[str, Mapping[str, float]]
# The per-GPU means (machine/gpu_sampler.py) a cell's row carries, averaged over its GPUs.
GPU_MEANS = ("utilization_pct", "power_w", "sm_clock_mhz", "memory_used_mib", "temperature_c")


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
    gpus: dict[str, Any] | None = None  # `cell_gpus` of its record; None: not sampled
    prefix_caching: bool = True  # False: the arm ran with prefix caching off

    @property
    def variant(self) -> str:
        """What the summary aggregates it under: its arm, or `<arm>+pc-off`."""
        return variant(self.arm, self.prefix_caching)

    @property
    def gpu_flags(self) -> list[str]:
        """A GPU that throttled or sat idle in the measured phase, one line each."""
        return list((self.gpus or {}).get("flags") or ())

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "prefix_caching": self.prefix_caching,
                "concurrency": self.concurrency, "repeat": self.repeat, "cell_id": self.cell_id,
                "valid": self.valid, "reasons": list(self.reasons),
                "output_throughput": self.output_throughput,
                "request_throughput": self.request_throughput,
                "total_output_tokens": self.total_output_tokens,
                "acceptance_length": self.acceptance_length,
                "accepted_per_draft": self.accepted_per_draft,
                "latency_ms": plain_latency(self.latency_ms), "boot_s": self.boot_s,
                "speedup": self.speedup, "lossless": self.lossless_check,
                "degraded": list(self.degraded),
                "goodput": None if self.goodput is None else self.goodput.to_dict(),
                "gpus": self.gpus}


def cell_gpus(section: Any) -> dict[str, Any] | None:
    """A cell's `gpus` record in one row: the tool, how many GPUs were sampled in the measured
    phase, each GPU_MEANS averaged over them, and the sampler's flags (a GPU that throttled or
    sat idle); None when nothing was sampled."""
    if not isinstance(section, Mapping):
        return None
    measured = [g.get("means") for g in section.get("measured") or ()
                if isinstance(g, Mapping) and isinstance(g.get("means"), Mapping)]
    flags = [str(f) for f in section.get("flags") or ()]
    if not measured and not flags:
        return None
    means = {}
    for key in GPU_MEANS:
        values = [float(v) for m in measured if isinstance(v := m.get(key), int | float)
                  and not isinstance(v, bool)]
        if values:
            means[key] = round(fmean(values), 1)
    return {"tool": str(section.get("tool") or ""), "gpus": len(measured), "means": means,
            "flags": flags}


@dataclass(frozen=True)
class ArmResult:
    """One arm (`arm`: its variant, `<arm>+pc-off` with prefix caching off) at one
    concurrency over its valid repeats."""

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


