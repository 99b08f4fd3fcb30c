"""The model as its checkpoint states it: its own name (never the served name alone) and its
quantization in words ("FP4 expert weights with FP8 mixed precision") with the config.json
fields it is read from. Pure: the run's checkpoint record (`provenance.json`'s `checkpoint`,
`launch/provenance.py`) in, text out."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dspark_cli.report.words import UNKNOWN

# Where the name came from (`launch/provenance.py` writes one of these keys).
NAME_FROM = {"config": "config.json's _name_or_path", "hf_cache": "the Hugging Face cache's "
             "repository", "directory": "the checkpoint directory's name; config.json names "
             "none"}


def model_name(ckpt: Mapping[str, Any], served: str | None) -> str:
    """"deepseek-ai/DeepSeek-V4-Flash-DSpark (the Hugging Face cache's repository), served as
    dsv4flash"."""
    name = ckpt.get("name")
    shown = (f"{name} ({NAME_FROM.get(str(ckpt.get('name_from')), 'the checkpoint record')})"
             if name else f"{UNKNOWN} (the checkpoint record names none)")
    return shown + (f", served as {served}" if served and served != name else "")


def _value(v: Any) -> str:
    return json.dumps(v, separators=(", ", ": ")) if isinstance(v, list) else str(v)


def quantization(ckpt: Mapping[str, Any]) -> str:
    """The quantization in words, then every recorded field of config.json it is read from."""
    q = ckpt.get("quantization")
    expert = ckpt.get("expert_dtype")
    if q is None:
        if not ckpt.get("exists"):
            return UNKNOWN
        return "none (config.json has no quantization_config)" + (
            f"; expert_dtype={expert}" if expert else "")
    method = q.get("quant_method")
    expert = expert or q.get("expert_dtype")
    if method and expert and str(expert).lower() != str(method).lower():
        words = f"{str(expert).upper()} expert weights with {str(method).upper()} mixed precision"
    elif method:
        words = str(method).upper()
    else:
        words = "quantization_config without a quant_method"
    fields = ", ".join(f"{k}={_value(v)}" for k, v in sorted(q.items())) or "empty"
    top = f"expert_dtype={ckpt['expert_dtype']}; " if ckpt.get("expert_dtype") else ""
    return f"{words} (config.json: {top}quantization_config {fields})"
