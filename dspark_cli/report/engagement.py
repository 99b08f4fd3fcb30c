"""The report's engagement evidence per arm, from the bench cells' records: whether vLLM's own
per-request speculative-decoding metrics showed what the arm's launch expects (adaptive
verification trims some steps below K; a fixed-K drafter proposes K every step), and the DSpark
draft's parameter count against its pin. Pure: cell records (already type-checked) in, rows out.
The smoke's `engagement` and `draft_params` checks are in the smoke section's table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EXPECTED = {"adaptive": "some steps below K (adaptive verification)",
            "fixed_k": "K every step (fixed K)", "at_most_k": "up to K (none held)"}


@dataclass(frozen=True)
class EngagementRow:
    arm: str
    expected: str  # what the launch expects of the steps
    cells: int  # cells whose probe was judged (held to the expectation)
    held: int  # of those, cells where it held
    steps: str  # "12 of 340 steps below K=7 (4 cells)", or "-"
    outcome: str  # "shown in 3 of 3 cells", "NOT SHOWN in c8-r1, ...", "not measured: why"
    draft_params: str  # "97 (pinned 97) in 3 cells", "96, pinned 97 (MISMATCH) in ...", "-"


def _cells(n: int) -> str:
    return f"{n} cell" if n == 1 else f"{n} cells"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _steps(sections: Sequence[Mapping[str, Any]]) -> str:
    measured = [s for s in sections if _count(s.get("steps"))]
    if not measured:
        return "-"
    ks = {s.get("k") for s in measured}
    k = f"K={ks.pop()}" if len(ks) == 1 else "K"
    total = sum(_count(s.get("steps")) for s in measured)
    if all(isinstance(s.get("short_steps"), int) for s in measured):
        return (f"{sum(_count(s.get('short_steps')) for s in measured)} of {total} steps below "
                f"{k} ({_cells(len(measured))})")
    return (f"{sum(_count(s.get('trimmed_tokens')) for s in measured)} draft slots of {total} "
            f"steps x {k} left out ({_cells(len(measured))})")


def _params(cells: Sequence[Mapping[str, Any]]) -> str:
    seen = [(c.get("cell_id"), c["draft_params"]) for c in cells
            if isinstance(c.get("draft_params"), Mapping)]
    if not seen:
        return "-"
    bad = [f"{cid}: {p.get('sentence')}" for cid, p in seen if p.get("ok") is not True]
    if bad:
        return "MISMATCH: " + "; ".join(bad)
    first = seen[0][1]
    return f"{first.get('params')} (pinned {first.get('expected')}) in {_cells(len(seen))}"


def _row(arm: str, cells: Sequence[Mapping[str, Any]]) -> EngagementRow | None:
    sections = [c["engagement"] for c in cells if isinstance(c.get("engagement"), Mapping)]
    params = _params(cells)
    if not sections and params == "-":
        return None
    expected = next((str(s.get("expected")) for s in sections if s.get("expected")), "")
    judged = [(c.get("cell_id"), c["engagement"]) for c in cells
              if isinstance(c.get("engagement"), Mapping)
              and isinstance(c["engagement"].get("ok"), bool)]
    failed = [str(cid) for cid, s in judged if s.get("ok") is False]
    if not judged:
        why = next((str(s.get("sentence")) for s in sections if s.get("sentence")), "no probe")
        unseen = any(s.get("outcome") == "full_k" for s in sections)  # adaptive, no trim seen
        outcome = f"{'not shown' if unseen else 'not measured'}: {why}"
    elif failed:
        outcome = f"NOT SHOWN in {', '.join(failed)}: " + next(
            str(s.get("sentence")) for _, s in judged if s.get("ok") is False)
    else:
        outcome = f"shown in {len(judged)} of {_cells(len(sections))}"
    return EngagementRow(arm, EXPECTED.get(expected, expected or "-"), len(judged),
                         len(judged) - len(failed), _steps(sections), outcome, params)


def engagement_rows(cells: Sequence[Mapping[str, Any]]) -> tuple[EngagementRow, ...]:
    """One row per arm that speculates (or has a pinned draft), in the protocol's arm order."""
    protocol = next((c["protocol"] for c in cells if isinstance(c.get("protocol"), Mapping)), {})
    arms = list(dict.fromkeys([*(str(a) for a in protocol.get("arms") or ()),
                               *(str(c.get("arm")) for c in cells)]))
    rows = (_row(arm, [c for c in cells if str(c.get("arm")) == arm]) for arm in arms)
    return tuple(r for r in rows if r is not None)
