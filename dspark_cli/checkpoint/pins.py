"""Pinned checkpoint facts (`model.expected.*`): each mismatch is reported as expected vs actual;
a null pin is not checked.

`total_bytes` is the sum of the shard files' sizes (headers included), the figure `du -b` gives
for the *.safetensors files; `architecture` passes when config.json's `architectures` lists it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dspark_cli.checkpoint.content import sha256_file
from dspark_cli.checkpoint.result import Check, Problem, problem
from dspark_cli.checkpoint.structure import CONFIG_NAME, INDEX_NAME, Layout

PINNED = ("config_sha256", "index_sha256", "num_shards", "total_bytes", "architecture")


@dataclass(frozen=True)
class Facts:
    """What the checkpoint on disk says about itself, in the pins' terms."""

    config_sha256: str | None
    index_sha256: str | None
    num_shards: int
    total_bytes: int
    architectures: tuple[str, ...]


def _sha256_of(layout: Layout, name: str) -> str | None:
    path = layout.files.get(name)
    return None if path is None else sha256_file(path)


def gather_facts(layout: Layout) -> Facts:
    """Compute the pinned facts from disk (config and index are small; shards are only stat'ed)."""
    total = 0
    for name in layout.shards:
        with contextlib.suppress(OSError, ValueError):  # the structural pass reports it
            total += (layout.root / name).stat().st_size
    archs = (layout.config or {}).get("architectures")
    num_shards = len(layout.index.shard_names) if layout.index else len(layout.shards)
    return Facts(
        config_sha256=_sha256_of(layout, CONFIG_NAME),
        index_sha256=_sha256_of(layout, INDEX_NAME),
        num_shards=num_shards,
        total_bytes=total,
        architectures=tuple(str(a) for a in archs) if isinstance(archs, list) else (),
    )


def _fmt(value: object) -> str:
    if value is None:
        return "absent"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def check_pins(expected: Mapping[str, Any], facts: Facts) -> list[Problem]:
    """Compare every non-null pin with the facts."""
    problems = []
    for key in PINNED:
        want = expected.get(key)
        if want is None:
            continue
        if key == "architecture":
            ok = want in facts.architectures
            have: object = ", ".join(facts.architectures) or None
        else:
            have = getattr(facts, key)
            ok = (str(want).lower() == str(have).lower()) if key.endswith("sha256") else (
                want == have
            )
        if not ok:
            problems.append(
                problem("pin-mismatch", Check.pins, f"model.expected.{key}", _fmt(want),
                        _fmt(have))
            )
    return problems
