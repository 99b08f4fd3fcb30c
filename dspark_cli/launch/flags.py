"""One vLLM option as argv words, the one rendering every command of a plan uses (the plan's,
each node's)."""

from __future__ import annotations

import json
from typing import Any

VLLM_DEFAULT_PORT = 8000


def render_flag(dest: str, value: Any) -> list[str]:
    """One vLLM option as argv: True -> `--x`, False -> `--no-x`, dict -> compact JSON,
    list -> `--x a b`; None is not rendered."""
    flag = "--" + dest.replace("_", "-")
    if value is None:
        return []
    if isinstance(value, bool):
        return [flag] if value else ["--no-" + dest.replace("_", "-")]
    if isinstance(value, dict):
        return [flag, json.dumps(value, separators=(",", ":"))]
    if isinstance(value, list | tuple):
        return [flag, *(str(v) for v in value)]
    return [flag, str(value)]
