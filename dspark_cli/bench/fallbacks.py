"""Speculative decoding that runs but is not what was asked (pure): an arm that asked for
adaptive verification and ran without it, and a drafter that accepts (almost) nothing.

vLLM does not fail closed on either. Adaptive verification is refused at startup with a line
of its own, or the V1 model runner is chosen (it refuses DSpark), or the confidence head is
missing and vLLM silently switches to its online acceptance estimator (the DSpark draft's
load line then counts one parameter fewer: `draft_params`); the first two are log families
(`logs.fallbacks`), the last the draft's pin. A cell whose arm asked for adaptive verification
and shows any of them is invalid. An acceptance rate at or
below `watch.min_acceptance` (0.0: none accepted) is flagged, not invalid: the number is real,
the speculation is useless (0% acceptance was seen on ROCm in more than one engine).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def adaptive_reasons(asked: bool, fallbacks: Sequence[str],
                     draft_params: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Why a cell that asked for adaptive verification ran without it (empty: no sign);
    `fallbacks` are the cell's `logs.fallbacks` lines ("family: line")."""
    if not asked:
        return ()
    reasons = [f"adaptive verification asked for, but the log shows {line.strip()}"
               for line in fallbacks]
    if draft_params is not None and draft_params.get("params") is not None and (
            draft_params.get("ok") is False):
        reasons.append("adaptive verification asked for, but "
                       f"{draft_params.get('sentence')}: without its confidence head vLLM "
                       "uses its online acceptance estimator")
    return tuple(reasons)


def acceptance_flag(spec: Mapping[str, Any] | None,
                    floor: float | None) -> dict[str, Any] | None:
    """The cell's acceptance against the floor; None where nothing was drafted or no floor."""
    if floor is None or not spec or not spec.get("draft_tokens"):
        return None
    rate = float(spec["accepted"]) / float(spec["draft_tokens"])
    low = rate <= floor
    sentence = (f"acceptance rate {rate:.4f} is at or below watch.min_acceptance {floor:g}: "
                "the drafter runs and accepts (almost) nothing" if low else
                f"acceptance rate {rate:.4f} above watch.min_acceptance {floor:g}")
    return {"rate": round(rate, 4), "floor": floor, "flagged": low, "sentence": sentence}
