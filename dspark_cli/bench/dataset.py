"""The frozen request set: a SPEED-Bench split or a JSONL file, pinned by its SHA-256.

A benchmark number means something only for the requests that produced it, so a file-backed
set must match its pin byte for byte, and SPEED-Bench's public placeholder rows (which carry a
sentinel instead of prompts) are refused. `random` prompts come from vLLM's seeded generator
and have no file to pin.

What a cell's requests were, so its acceptance says where it came from (pure).

Acceptance depends on the data: random-token prompts inflate position-0 acceptance, and
chat-templated prompts differ from raw text (InferenceX requires chat-templated data for
speculative decoding). vLLM's `vllm bench serve` applies the tokenizer's chat template to a
custom or SPEED-Bench request file unless `--skip-chat-template` is passed
(benchmarks/datasets/datasets.py); its random prompts are token ids drawn at random."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_cli.errors import CheckFailed, UsageError

SPEED_BENCH_SENTINEL = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
SPEED_BENCH_PREPARE = (
    "https://raw.githubusercontent.com/NVIDIA-NeMo/Skills/refs/heads/main/"
    "nemo_skills/dataset/speed-bench/prepare.py"
)
_SHA256 = re.compile(r"[0-9a-f]{64}")
# The key each row must carry for vLLM's loader of that kind.
_ROW_KEY = {"speed_bench": "messages", "jsonl": "prompt"}


@dataclass(frozen=True)
class DatasetSpec:
    kind: str  # speed_bench | jsonl | random
    path: Path | None
    subset: str | None
    sha256: str | None
    input_tokens: int | None
    seed: int

    @property
    def request_file(self) -> Path | None:
        """The file whose bytes are the request set (None for random prompts)."""
        if self.kind == "speed_bench":
            assert self.path is not None and self.subset is not None
            return self.path / f"{self.subset}.jsonl"
        return self.path if self.kind == "jsonl" else None


@dataclass(frozen=True)
class VerifiedDataset:
    spec: DatasetSpec
    sha256: str | None
    rows: int | None


def dataset_spec(dataset: Mapping[str, Any], base_dir: Path) -> DatasetSpec:
    """Validate the `bench.dataset` config (plain values); relative paths are from `base_dir`."""
    kind = str(dataset["kind"])
    raw_path = dataset.get("path")
    path = None if raw_path is None else (base_dir / str(raw_path)).resolve()
    sha = dataset.get("sha256")
    if sha is not None:
        sha = str(sha).lower()
        if not _SHA256.fullmatch(sha):
            raise UsageError(f"bench.dataset.sha256 {dataset['sha256']!r} is not 64 hex digits.")
    spec = DatasetSpec(
        kind=kind,
        path=path,
        subset=dataset.get("subset"),
        sha256=sha,
        input_tokens=dataset.get("input_tokens"),
        seed=int(dataset.get("seed") or 0),
    )
    if kind in ("speed_bench", "jsonl") and path is None:
        raise UsageError(f"bench.dataset.kind={kind} needs bench.dataset.path.")
    if kind == "speed_bench" and not spec.subset:
        raise UsageError(
            "bench.dataset.kind=speed_bench needs bench.dataset.subset (e.g. throughput_1k)."
        )
    if kind == "random" and not (isinstance(spec.input_tokens, int) and spec.input_tokens > 0):
        raise UsageError("bench.dataset.kind=random needs bench.dataset.input_tokens > 0.")
    return spec


def verify(spec: DatasetSpec, needed_rows: int) -> VerifiedDataset:
    """Hash the request file, check its rows, and refuse a mismatch or placeholder prompts.

    Reads the file once, line by line, so a large split costs one sequential read.
    """
    file = spec.request_file
    if file is None:
        return VerifiedDataset(spec, None, None)
    if not file.is_file():
        hint = (
            "make it from a local copy of the SPEED-Bench release with `dspark prepare "
            f"speed-bench SRC --subset {spec.subset} --out {file.parent}` (docs/bench.md)"
            if spec.kind == "speed_bench"
            else "Set bench.dataset.path to an existing JSONL file."
        )
        raise UsageError(f"Request set {file} does not exist.", hint=hint)
    digest = hashlib.sha256()
    rows = 0
    key = _ROW_KEY[spec.kind]
    with file.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            digest.update(raw)
            if not raw.strip():
                continue
            text = raw.decode("utf-8", errors="replace")
            if SPEED_BENCH_SENTINEL in text:
                raise CheckFailed(
                    f"Request set {file} holds SPEED-Bench's placeholder prompts (line "
                    f"{line_no}: {SPEED_BENCH_SENTINEL!r}), not the benchmark's data.",
                    hint=f"Rebuild the real prompts with {SPEED_BENCH_PREPARE}.",
                )
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                raise CheckFailed(f"Request set {file} line {line_no} is not JSON: {exc}.") from exc
            if not isinstance(row, dict) or key not in row:
                raise CheckFailed(
                    f"Request set {file} line {line_no} has no {key!r} field, which vLLM's "
                    f"{spec.kind} loader needs."
                )
            rows += 1
    actual = digest.hexdigest()
    if spec.sha256 is None:
        raise UsageError(
            f"Request set {file} is not pinned: a benchmark on an unpinned request set cannot "
            f"be compared with another. Its SHA-256 is {actual}.",
            hint=f"If this is the set you mean, pin it: bench.dataset.sha256={actual}",
        )
    if actual != spec.sha256:
        raise CheckFailed(
            f"Request set {file} has SHA-256 {actual}, but the protocol pins {spec.sha256}: it "
            "is not the frozen request set.",
            hint="Restore the pinned file, or pin the new one on purpose with "
            f"bench.dataset.sha256={actual}",
        )
    if rows < needed_rows:
        raise UsageError(
            f"Request set {file} has {rows} requests but a phase of the protocol sends "
            f"{needed_rows}: vLLM would repeat requests.",
            hint="Lower bench.measured_prompts or use a larger request set.",
        )
    return VerifiedDataset(spec, actual, rows)


SKIP_CHAT_TEMPLATE = "--skip-chat-template"


def describe(dataset: VerifiedDataset, argv: Sequence[str]) -> dict[str, Any]:
    """The request set's name, SHA-256, rows and whether its prompts were chat-templated or
    random tokens, as the measured phase's command line (`argv`) sent them."""
    spec = dataset.spec
    random_tokens = spec.kind == "random"
    name = (f"random ({spec.input_tokens} input tokens, seed {spec.seed})" if random_tokens
            else f"speed_bench/{spec.subset}" if spec.kind == "speed_bench"
            else spec.request_file.name if spec.request_file is not None else spec.kind)
    templated = not random_tokens and SKIP_CHAT_TEMPLATE not in argv
    how = "chat-templated by the load generator" if templated else "raw text"
    sentence = ("random token ids: position-0 acceptance is inflated, not what real prompts "
                "give" if random_tokens else f"{name}, {how}, SHA-256 {dataset.sha256}")
    return {"name": name, "kind": spec.kind, "sha256": dataset.sha256, "rows": dataset.rows,
            "chat_templated": templated, "random_tokens": random_tokens, "sentence": sentence}
