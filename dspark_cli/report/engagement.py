"""The report's engagement evidence per arm, from the bench cells' records: whether vLLM's own
per-request speculative-decoding metrics showed what the arm's launch expects (adaptive
verification trims some steps below K; a fixed-K drafter proposes K every step), and the DSpark
draft's parameter count against its pin. Pure: cell records (already type-checked) in, rows out.
Every outcome is recomputed from the section's counts (`spec_metrics.judge` on the steps, the
draft's parameters against the pin), never taken from the record's `ok` or sentence: "0 of 340
steps below K" is no engagement, 96 parameters against a pin of 97 a mismatch. The smoke's
`engagement` and `draft_params` checks are in the smoke section's table. Rendered here too
(`engagement_section`), record strings through `markup`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dspark_cli.report.markup import table, text
from dspark_cli.server.spec_metrics import FULL_K, Engagement, Judgement, judge

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
    bad = [f"{cid}: {_mismatch(p.get('params'), p.get('expected'))}" for cid, p in seen
           if not _is_count(p.get("params")) or not _is_count(p.get("expected"))
           or p["params"] != p["expected"]]
    if bad:
        return "MISMATCH: " + "; ".join(bad)
    first = seen[0][1]
    return f"{first.get('params')} (pinned {first.get('expected')}) in {_cells(len(seen))}"


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _mismatch(params: Any, pin: Any) -> str:
    """The sentence `draft_params.seen_params` writes, from the counts themselves."""
    if not _is_count(params):
        return "no parameter count recorded"
    hint = (" (one fewer: is the confidence head missing?)"
            if _is_count(pin) and params == pin - 1 else "")
    return f"DSpark draft loaded {params} params, pinned {pin if _is_count(pin) else 'none'}{hint}"


def judged(section: Mapping[str, Any]) -> Judgement:
    """The section's outcome recomputed from its counts (what the launch expects, the steps,
    the draft tokens, K); counts that cannot all hold are not measured."""
    counts = {k: section.get(k) for k in ("requests", "reported", "steps", "draft_tokens",
                                          "accepted")}
    k, short = section.get("k"), section.get("short_steps")
    level = section.get("level")
    problems = [str(p) for p in section.get("problems") or ()]
    if not all(_is_count(v) for v in counts.values()) or (k is not None and not _is_count(k)) \
            or (short is not None and not _is_count(short)):
        problems.append("the recorded counts are not counts")
        counts = dict.fromkeys(counts, 0)
    elif k is not None and (counts["draft_tokens"] > counts["steps"] * k
                            or counts["accepted"] > counts["draft_tokens"]
                            or (short is not None and short > counts["steps"])
                            or (short is not None and (short > 0)
                                != (counts["steps"] * k > counts["draft_tokens"]))):
        problems.append(f"{counts['steps']} steps of K={k}, {counts['draft_tokens']} drafted, "
                        f"{counts['accepted']} accepted and {short} short steps cannot all hold")
    seen = Engagement(level if isinstance(level, str) else None, counts["requests"],
                      counts["reported"], counts["steps"], counts["draft_tokens"],
                      counts["accepted"], k, short, tuple(problems),
                      str(section.get("why") or ""))
    expected = section.get("expected")
    return judge(seen, expected if isinstance(expected, str) else None)


def _row(arm: str, cells: Sequence[Mapping[str, Any]]) -> EngagementRow | None:
    sections = [c["engagement"] for c in cells if isinstance(c.get("engagement"), Mapping)]
    params = _params(cells)
    if not sections and params == "-":
        return None
    expected = next((str(s.get("expected")) for s in sections if s.get("expected")), "")
    verdicts = [(c.get("cell_id"), judged(c["engagement"])) for c in cells
                if isinstance(c.get("engagement"), Mapping)]
    held = [(cid, v) for cid, v in verdicts if v.ok is not None]
    failed = [(str(cid), v) for cid, v in held if v.ok is False]
    if not held:
        why = next((v.sentence for _, v in verdicts if v.sentence), "no probe")
        unseen = any(v.outcome == FULL_K for _, v in verdicts)  # adaptive, no trim seen
        outcome = f"{'not shown' if unseen else 'not measured'}: {why}"
    elif failed:
        outcome = f"NOT SHOWN in {', '.join(c for c, _ in failed)}: {failed[0][1].sentence}"
    else:
        outcome = f"shown in {len(held)} of {_cells(len(sections))}"
    return EngagementRow(arm, EXPECTED.get(expected, expected or "-"), len(held),
                         len(held) - len(failed), _steps(sections), outcome, params)


def engagement_rows(cells: Sequence[Mapping[str, Any]]) -> tuple[EngagementRow, ...]:
    """One row per arm that speculates (or has a pinned draft), in the protocol's arm order."""
    protocol = next((c["protocol"] for c in cells if isinstance(c.get("protocol"), Mapping)), {})
    arms = list(dict.fromkeys([*(str(a) for a in protocol.get("arms") or ()),
                               *(str(c.get("arm")) for c in cells)]))
    rows = (_row(arm, [c for c in cells if str(c.get("arm")) == arm]) for arm in arms)
    return tuple(r for r in rows if r is not None)


TITLE = "### Adaptive verification seen to engage"


def engagement_section(rows: Sequence[EngagementRow]) -> list[str]:
    """The section (nothing when no arm speculates)."""
    if not rows:
        return []
    lines = [TITLE, "",
             "After its measured phase every cell of an arm that speculates sent as many "
             "requests at once as its concurrency to the launch `dspark serve` starts (nothing "
             "added); their verify steps, from the answers' per-request metrics where the server "
             "reports them, else from vLLM's /metrics spec-decode counters, are held to what the "
             "arm's launch expects, recomputed from the counts. A DSpark cell also read the "
             "draft's parameter count from its load line.", ""]
    lines += table(("arm", "expected steps", "held", "steps", "outcome", "draft params"),
                   [(text(r.arm), text(r.expected), f"{r.held} of {r.cells}", text(r.steps),
                     text(r.outcome), text(r.draft_params)) for r in rows])
    return [*lines, ""]
