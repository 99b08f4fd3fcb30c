"""The decision tables for the terminal: goodput under the protocol's latency objectives (with
intervals over repeats) and the arm to run at each concurrency."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dspark_cli.bench import stats
from dspark_cli.bench.summary import Summary

if TYPE_CHECKING:
    from rich.console import RenderableType


def interval(iv: stats.Interval | None, fmt: str, scale: float = 1.0, unit: str = "") -> str:
    """"12.3 [10.1, 14.5]"; just the estimate when unbounded; "-" when absent."""
    if iv is None:
        return "-"
    point = format(iv.estimate * scale, fmt) + unit
    if iv.low is None or iv.high is None:
        return point
    return f"{point} [{format(iv.low * scale, fmt)}, {format(iv.high * scale, fmt)}]"


def winner_reason(summary: Summary, concurrency: int) -> tuple[str, str]:
    """(arm or "no clear winner", the verdict behind it) at one concurrency."""
    w = next((w for w in summary.winners if w.concurrency == concurrency), None)
    if w is None:
        return "no clear winner", "not measured"
    if w.arm is None:
        return "no clear winner", w.note + (f"; a proposal keeps {w.kept} here" if w.kept
                                            else "")
    s = w.runner_up
    why = "over every other arm" if s is None else \
        f"{stats.words(s)} than {s.baseline} ({interval(s.ratio, '.3f', unit='x')})"
    return w.arm, why


def tables(summary: Summary) -> list[RenderableType]:
    """Goodput per arm and concurrency (when the protocol names objectives), then the winner
    per concurrency."""
    from rich.table import Table

    out: list[RenderableType] = []
    pct = f"{stats.CONFIDENCE:.0%}"
    if summary.objectives is not None:
        t = Table(title=f"goodput: {summary.objectives.words()}")
        for name in ("concurrency", "arm", f"output goodput tok/s [{pct}]",
                     f"good requests [{pct}]", "met"):
            t.add_column(name, justify="left" if name in ("arm", "met") else "right")
        for r in summary.results:
            g = r.goodput
            t.add_row(str(r.concurrency), r.arm,
                      interval(g.output_goodput if g else None, ".1f"),
                      interval(g.share if g else None, ".0f", 100, "%"),
                      "-" if g is None else f"{g.met} of {len(g.values)}")
        out.append(t)
    if summary.winners:
        metric = summary.winners[0].metric
        t = Table(title=f"the arm to run (best {metric}, only where the verdict says faster)")
        for name in ("concurrency", "run", "why"):
            t.add_column(name, justify="right" if name == "concurrency" else "left")
        for w in summary.winners:
            arm, why = winner_reason(summary, w.concurrency)
            t.add_row(str(w.concurrency), arm, why)
        out.append(t)
    return out
