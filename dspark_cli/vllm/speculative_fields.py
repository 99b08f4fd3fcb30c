"""Which `--speculative-config` keys the installed vLLM has, read from its source (never
imported: an import takes seconds): `SpeculativeConfig`'s fields in vllm/config/speculative.py."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path


def has_field(name: str) -> bool:
    """Whether the installed vLLM's SpeculativeConfig declares `name`; False without vLLM."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):  # an import hook that refuses it: not installed here
        return False
    for root in (spec.submodule_search_locations or []) if spec else []:
        source = Path(root) / "config" / "speculative.py"
        if source.is_file():
            text = source.read_text(encoding="utf-8", errors="replace")
            return re.search(rf"^    {re.escape(name)}\s*:", text, re.MULTILINE) is not None
    return False
