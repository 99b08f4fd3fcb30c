"""What a cell's requests were, so its acceptance says where it came from (pure).

Acceptance depends on the data: random-token prompts inflate position-0 acceptance, and
chat-templated prompts differ from raw text (InferenceX requires chat-templated data for
speculative decoding). vLLM's `vllm bench serve` applies the tokenizer's chat template to a
custom or SPEED-Bench request file unless `--skip-chat-template` is passed
(benchmarks/datasets/datasets.py); its random prompts are token ids drawn at random.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dspark_cli.bench.dataset import VerifiedDataset

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
