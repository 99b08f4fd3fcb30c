"""The `dspark validate` primary schema: the launch, the smoke's and the bench's settings, and
the `validate` section that says which stages run and how."""

from __future__ import annotations

from dataclasses import dataclass, field

from dspark_cli.config.bench import BenchPrimary
from dspark_cli.config.schema import store_schema
from dspark_cli.config.smoke import SmokePrimary


@dataclass
class CheckpointStage:
    """Structure and heads always; content hashes when asked (a manifest, or `hash` for Hugging
    Face cache blobs, which carry their hash in their names)."""

    manifest: str | None = None
    hash: bool = False


@dataclass
class TestsStage:
    """Focused tests: pytest node ids run in a vLLM source tree; empty: the stage is not run."""

    source: str | None = None
    node_ids: list[str] = field(default_factory=list)
    python: str | None = None  # the interpreter that runs pytest (null: dspark's own)
    timeout_s: float = 3600.0
    # The ref the branch is measured against (the report's base: `git merge-base HEAD it`).
    upstream: str | None = "origin/main"
    # Lint/format commands run in the source tree; `{changed}` is the changed Python files.
    lint: list[str] = field(default_factory=list)
    lint_timeout_s: float = 600.0


@dataclass
class BenchStage:
    stop_on_failure: bool = False


@dataclass
class AccuracyStage:
    """The same lm_eval eval against every bench arm's server (dspark_cli/accuracy/): a local
    GSM8K-format JSONL file pinned by SHA-256, scored by lm-evaluation-harness."""

    dataset: str | None = None  # relative: under dspark's conf/
    sha256: str | None = None
    limit: int | None = None  # the first N documents (null: all)
    num_fewshot: int = 0
    max_gen_toks: int = 256
    temperature: float = 0.0
    num_concurrent: int = 8
    margin: float = 0.02  # accuracy difference (absolute) still comparable
    baseline: str = "none"  # the arm the others are compared with (no speculation)
    python: str | None = None  # the interpreter that runs lm_eval (null: dspark's own)
    timeout_s: float = 3600.0


@dataclass
class ValidateConf:
    checkpoint: CheckpointStage = field(default_factory=CheckpointStage)
    tests: TestsStage = field(default_factory=TestsStage)
    bench: BenchStage | None = field(default_factory=BenchStage)  # null: no bench stage
    accuracy: AccuracyStage | None = field(default_factory=AccuracyStage)  # null: none


@dataclass
class ValidatePrimary(BenchPrimary, SmokePrimary):
    # A smoke's and a bench's config (the stages hand it to both); fields: launch, smoke, bench.
    validate: ValidateConf = field(default_factory=ValidateConf)


def register() -> None:
    store_schema("validate_schema", ValidatePrimary)
