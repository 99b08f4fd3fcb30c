"""The report's engagement section in Markdown: per arm, whether the verify steps vLLM reported
showed what its launch expects, and the DSpark draft's parameter count against its pin. Record
strings go through `markup` (they are untrusted)."""

from __future__ import annotations

from collections.abc import Sequence

from dspark_cli.report.engagement import EngagementRow
from dspark_cli.report.markup import table, text

TITLE = "### Adaptive verification seen to engage"


def engagement(rows: Sequence[EngagementRow]) -> list[str]:
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
