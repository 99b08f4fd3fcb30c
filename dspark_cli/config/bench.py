"""The `bench` config group's schema: a typo'd key or a wrong type fails while Hydra composes.

A protocol is data: which arms (speculative profiles) and concurrencies make the cells, which
frozen request set drives them, and the phases every cell runs on its own cold server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from dspark_cli.compat import StrEnum
from dspark_cli.config.schema import LaunchConf, store_schema


class DatasetKind(StrEnum):
    speed_bench = "speed_bench"  # a SPEED-Bench directory holding `<subset>.jsonl`
    jsonl = "jsonl"  # a custom JSONL file: {"prompt": ..., "output_tokens": N}
    random = "random"  # vLLM's synthetic random prompts (no file, nothing to pin)


@dataclass
class DatasetConf:
    kind: DatasetKind = MISSING
    path: str | None = None
    subset: str | None = None  # speed_bench only: the split file's stem, e.g. throughput_1k
    sha256: str | None = None  # the request file's SHA-256; a file without a pin is refused
    input_tokens: int | None = None  # random only: prompt length
    seed: int = 0  # vLLM's sampling/shuffle seed: with the file it freezes the request order


@dataclass
class SamplingConf:
    temperature: float = 1.0
    top_p: float = 1.0
    max_output_tokens: int = MISSING
    ignore_eos: bool = False


@dataclass
class WarmupConf:
    num_prompts: int = MISSING
    concurrency: int | None = None  # null: the cell's own concurrency
    output_tokens: int = MISSING


@dataclass
class LosslessConf:
    """Every arm also answers pinned prompts greedily; tokens compared with `reference`'s."""

    enabled: bool = True
    prompts: str = "data/greedy_prompts.jsonl"  # JSONL {"prompt": ...}; relative: to conf/
    sha256: str | None = None  # the prompt file's SHA-256; an unpinned file is refused
    max_tokens: int = 32  # each greedy answer's length
    reference: str = "none"  # the arm without speculation whose tokens are the truth
    # A cell whose share of sequences identical to the reference's is below this is invalid
    # (1.0 on CPU float32; a GPU's batch-shape-dependent sums may need a little less).
    min_identical: float = 1.0


@dataclass
class ObjectivesConf:
    """Latency objectives per request (ms; null: none); goodput counts the requests within all
    of them, and a cell meets the objective when `percentile` % of its requests did."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None
    percentile: float = 99.0


@dataclass
class EstimateConf:
    """What the dry run's wall-time estimate assumes, not measures: set them from a smoke's boot
    time and one cell's output speed on your machine."""

    boot_s: float = 300.0  # a cold boot until /health answers
    tokens_per_s: float = 30.0  # one request's output speed under the cell's load


@dataclass
class BenchConf:
    name: str = MISSING
    arms: list[str] = MISSING  # speculative profiles (config group `speculative`)
    baseline: str = MISSING  # the arm every speedup is measured against
    concurrencies: list[int] = MISSING  # run in this order
    sampling: SamplingConf = field(default_factory=SamplingConf)
    dataset: DatasetConf = field(default_factory=DatasetConf)
    warmups: list[WarmupConf] = field(default_factory=list)
    measured_prompts: int = MISSING
    # Each repeat of a cell is its own cold boot; two or more give intervals and verdicts.
    repeats: int = 1
    # Prefix caching as an axis: [on] runs each arm as configured; [on, off] runs every cell
    # again with `serving.args.enable_prefix_caching=false` (a cell id `<arm>+pc-off-c<N>`).
    prefix_caching: list[bool] = field(default_factory=lambda: [True])
    # Comparable: the speedup's 90% interval lies within 1 +- this fraction (0.05: +-5%).
    equivalence_margin: float = 0.05
    lossless: LosslessConf = field(default_factory=LosslessConf)
    # Goodput: each cell also reports the throughput of the requests that met these.
    objectives: ObjectivesConf = field(default_factory=ObjectivesConf)
    # A directory whose speculative/<arm>.yaml are arms too (a run's proposal/, written with
    # its proposal.json), so `dspark validate` can run a proposal as one more arm.
    profiles: str | None = None
    # Run one arm, concurrency and/or repeat only (a multirun job's cell); null: all of them.
    arm: str | None = None
    concurrency: int | None = None
    repeat: int | None = None
    phase_timeout_s: float = 7200.0
    metrics_timeout_s: float = 10.0
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
