"""The report's sections as frozen records: data only, built from run records by `build.py`
and rendered by `markdown.py`. What no record holds is "unknown" or "not run", never left out;
floats are rounded before they get here, so the JSON and the Markdown are stable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dspark_cli.report.accuracy import Accuracy
from dspark_cli.report.container import Reproduction
from dspark_cli.report.decisions import Decisions
from dspark_cli.report.engagement import EngagementRow
from dspark_cli.report.log_findings import LogFindings
from dspark_cli.report.revision import LintRow, SourceRevision
from dspark_cli.report.words import NOT_RUN as NOT_RUN
from dspark_cli.report.words import UNKNOWN as UNKNOWN
from dspark_cli.report.words import known as known


@dataclass(frozen=True)
class StageRow:
    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class Focused:
    status: str  # passed / failed / not run
    tests: tuple[str, ...]
    source: str | None
    counts: Mapping[str, int]
    detail: str


@dataclass(frozen=True)
class CheckRow:
    name: str
    status: str
    evidence: str


@dataclass(frozen=True)
class Counters:
    drafts: int
    draft_tokens: int
    accepted: int
    k: int | None
    relation: str  # "126 = 18 x K=7", or why there is none


@dataclass(frozen=True)
class Smoke:
    verdict: str
    passed: bool
    mode: str
    checks: tuple[CheckRow, ...]
    generated_tokens: int | None
    counters: Counters | None
    limits: str
    record: str


@dataclass(frozen=True)
class Environment:
    hardware: str
    tensor_parallel_size: str
    data_parallel_size: str
    model: str
    model_path: str
    architecture: str
    quantization: str
    checkpoint_size: str
    config_sha256: str
    index_sha256: str
    vllm_options: str  # which vLLM's option table the plan was checked with
    record: str


@dataclass(frozen=True)
class Provenance:
    image_tag: str
    image_id: str
    base_digest: str
    vllm_version: str
    vllm_commit: str  # what the installed vLLM reports (a patched build's base)
    vllm_patch: str  # a patch on top of it, as the image's config states it
    aiter_version: str
    aiter_commit: str
    aiter_wheel_sha256: str
    pytorch: str
    rocm: str
    cuda: str
    record: str


@dataclass(frozen=True)
class Serving:
    script: str  # the export lines and the command, as the run record has them
    record: str


@dataclass(frozen=True)
class Methodology:
    protocol: str
    dataset: str
    dataset_sha256: str
    requests: str
    sampling: str
    concurrency_order: tuple[int, ...]
    arms: tuple[str, ...]
    baseline: str
    repeats: int
    equivalence_margin: float | None
    cold_boot: str
    warmups: tuple[str, ...]
    validity_rules: tuple[str, ...]


@dataclass(frozen=True)
class ResultRow:
    """One arm at one concurrency over its repeats (bench/summary.py's result and speedup)."""

    arm: str
    throughput: float | None  # mean output tokens/s over the valid repeats
    low: float | None
    high: float | None
    n: int  # valid repeats
    acceptance_length: float | None
    accepted_per_draft: float | None
    latency_ms: Mapping[str, Mapping[str, float]]  # ttft/tpot/itl: p50, p99, ...
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    verdict: str  # "baseline" for the baseline arm
    note: str  # why there is no speedup, or which repeats it leaves out
    valid: bool  # every repeat valid
    reasons: tuple[str, ...]  # each invalid repeat's reasons
    degraded: tuple[str, ...] = ()  # families of lines where vLLM overrode what was asked


@dataclass(frozen=True)
class ResultTable:
    concurrency: int
    rows: tuple[ResultRow, ...]


@dataclass(frozen=True)
class LosslessRow:
    """One arm's greedy answers against the reference arm's (bench/lossless.py), all cells."""

    arm: str
    reference: str
    compared_by: str  # "token_ids" or "text"; "-" when nothing was compared
    cells: int  # cells compared
    identical: int  # sequences identical to the reference's, over those cells
    total: int
    share: float | None
    min_identical: float | None
    below: tuple[str, ...]  # cells below the share they need (invalid)
    first_divergence: str  # "cell, prompt P, index I", or "-"
    unchecked: int  # cells with answers but nothing to compare them with (or a failed probe)


@dataclass(frozen=True)
class Results:
    sentence: str
    baseline: str
    tables: tuple[ResultTable, ...]
    plot: str | None
    record: str
    lossless: tuple[LosslessRow, ...] = ()
    decisions: Decisions | None = None  # goodput, the arm per load, the proposal


@dataclass(frozen=True)
class Report:
    sources: tuple[str, ...]
    stages: tuple[StageRow, ...]
    focused: Focused
    smoke: Smoke | None
    environment: Environment
    provenance: Provenance
    serving: Serving | None
    methodology: Methodology | None
    results: Results | None
    revision: SourceRevision | None = None  # the focused stage's source tree (git)
    lint: tuple[LintRow, ...] = ()  # the focused stage's lint/format commands
    engagement: tuple[EngagementRow, ...] = ()  # per speculating arm (report/engagement.py)
    logs: LogFindings | None = None  # evidence lines, faults ruled out
    reproduction: Reproduction | None = None  # vLLM base and patch, the image caveat
    accuracy: Accuracy | None = None  # validate's accuracy stage (report/accuracy.py)
    # The watches' evidence from the bench cells, as Markdown lines (report/watches_md.py)
    watches: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

