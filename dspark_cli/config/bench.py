"""The `bench` config group's schema: a typo'd key or a wrong type fails while Hydra composes.

A protocol is data: which arms (speculative profiles) and concurrencies make the cells, which
frozen request set drives them, and the phases every cell runs on its own cold server.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import MISSING

from dspark_cli.compat import StrEnum
from dspark_cli.config.domain import POSITIVE, SHA256, between, checked
from dspark_cli.config.schema import LaunchConf, store_schema


def _below_one(value: float) -> str | None:
    """A fraction in [0, 1): a margin of 1 would call a speedup of 2x comparable."""
    return None if 0 <= value < 1 else "is out of range"


MARGIN = checked(_below_one, "a fraction in [0, 1)")
SHARE = between(0, 1)
AFTER_ZERO = between(0, low_open=True)  # a duration, a speed, a latency limit


class DatasetKind(StrEnum):
    speed_bench = "speed_bench"  # a SPEED-Bench directory holding `<subset>.jsonl`
    jsonl = "jsonl"  # a custom JSONL file: {"prompt": ..., "output_tokens": N}
    random = "random"  # vLLM's synthetic random prompts (no file, nothing to pin)


@dataclass
class DatasetConf:
    kind: DatasetKind = MISSING
    path: str | None = None
    subset: str | None = None  # speed_bench only: the split file's stem, e.g. throughput_1k
    # The request file's SHA-256; a file without a pin is refused.
    sha256: str | None = field(default=None, metadata=SHA256)
    input_tokens: int | None = field(default=None, metadata=POSITIVE)  # random only: its length
    seed: int = 0  # vLLM's sampling/shuffle seed: with the file it freezes the request order


@dataclass
class SamplingConf:
    temperature: float = 1.0
    top_p: float = 1.0
    max_output_tokens: int = field(default=MISSING, metadata=POSITIVE)
    ignore_eos: bool = False


@dataclass
class WarmupConf:
    num_prompts: int = field(default=MISSING, metadata=POSITIVE)
    # null: the cell's own concurrency
    concurrency: int | None = field(default=None, metadata=POSITIVE)
    output_tokens: int = field(default=MISSING, metadata=POSITIVE)


def _warmup_problem(warmup: Any) -> str | None:
    """A warmup's fields against their domains: the range walk checks a list's items, not
    the fields of the dataclasses a list holds."""
    bad = [f"{f.name}={warmup[f.name]}" for f in fields(WarmupConf)
           if f.metadata["domain"].problem(warmup[f.name])]
    return f"has {', '.join(bad)} out of range" if bad else None


WARMUPS = checked(_warmup_problem, "num_prompts, concurrency (or null) and output_tokens >= 1")


@dataclass
class LosslessConf:
    """Every arm also answers pinned prompts greedily; tokens compared with `reference`'s."""

    enabled: bool = True
    prompts: str = "data/greedy_prompts.jsonl"  # JSONL {"prompt": ...}; relative: to conf/
    # The prompt file's SHA-256; an unpinned file is refused.
    sha256: str | None = field(default=None, metadata=SHA256)
    max_tokens: int = field(default=32, metadata=POSITIVE)  # each greedy answer's length
    reference: str = "none"  # the arm without speculation whose tokens are the truth
    # A cell whose share of sequences identical to the reference's is below this is invalid
    # (1.0 on CPU float32; a GPU's batch-shape-dependent sums may need a little less).
    min_identical: float = field(default=1.0, metadata=SHARE)


@dataclass
class ObjectivesConf:
    """Latency objectives per request (ms; null: none); goodput counts the requests within all
    of them, and a cell meets the objective when `percentile` % of its requests did."""

    ttft_ms: float | None = field(default=None, metadata=AFTER_ZERO)
    tpot_ms: float | None = field(default=None, metadata=AFTER_ZERO)
    e2el_ms: float | None = field(default=None, metadata=AFTER_ZERO)
    percentile: float = field(default=99.0, metadata=between(0, 100, low_open=True))


@dataclass
class EstimateConf:
    """What the dry run's wall-time estimate assumes, not measures: set them from a smoke's boot
    time and one cell's output speed on your machine."""

    # A cold boot until /health answers, and one request's output speed under the cell's load.
    boot_s: float = field(default=300.0, metadata=between(0))
    tokens_per_s: float = field(default=30.0, metadata=AFTER_ZERO)


@dataclass
class BenchConf:
    name: str = MISSING
    arms: list[str] = MISSING  # speculative profiles (config group `speculative`)
    baseline: str = MISSING  # the arm every speedup is measured against
    concurrencies: list[int] = field(default=MISSING, metadata=POSITIVE)  # run in this order
    sampling: SamplingConf = field(default_factory=SamplingConf)
    dataset: DatasetConf = field(default_factory=DatasetConf)
    warmups: list[WarmupConf] = field(default_factory=list, metadata=WARMUPS)
    measured_prompts: int = field(default=MISSING, metadata=POSITIVE)
    # Each repeat of a cell is its own cold boot; two or more give intervals and verdicts.
    repeats: int = field(default=1, metadata=POSITIVE)
    # Prefix caching as an axis: [on] runs each arm as configured; [on, off] runs every cell
    # again with `serving.args.enable_prefix_caching=false` (a cell id `<arm>+pc-off-c<N>`).
    prefix_caching: list[bool] = field(default_factory=lambda: [True])
    # Comparable: the speedup's 90% interval lies within 1 +- this fraction (0.05: +-5%).
    equivalence_margin: float = field(default=0.05, metadata=MARGIN)
    lossless: LosslessConf = field(default_factory=LosslessConf)
    # Goodput: each cell also reports the throughput of the requests that met these.
    objectives: ObjectivesConf = field(default_factory=ObjectivesConf)
    # A directory whose speculative/<arm>.yaml are arms too (a run's proposal/, written with
    # its proposal.json), so `dspark validate` can run a proposal as one more arm.
    profiles: str | None = None
    # Run one arm, concurrency and/or repeat only (a multirun job's cell); null: all of them.
    arm: str | None = None
    concurrency: int | None = field(default=None, metadata=POSITIVE)
    repeat: int | None = field(default=None, metadata=POSITIVE)
    phase_timeout_s: float = field(default=7200.0, metadata=AFTER_ZERO)
    metrics_timeout_s: float = field(default=10.0, metadata=AFTER_ZERO)
    # Every boot uses the user's compile and JIT caches (false: fresh private ones per boot, for
    # a truly cold measurement; docs/bench.md, "Caches").
    warm_caches: bool = True
    estimate: EstimateConf = field(default_factory=EstimateConf)


@dataclass
class BenchPrimary(LaunchConf):
    bench: BenchConf = field(default_factory=BenchConf)


def register() -> None:
    """Register the `dspark bench` primary schema (the launch schema plus `bench`)."""
    store_schema("bench_schema", BenchPrimary)
