"""The bench summary for the terminal: one row per cell, invalid cells with their reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dspark_cli.bench.summary import Summary

if TYPE_CHECKING:
    from rich.table import Table


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table(summary: Summary) -> Table:
    """The terminal view: one row per cell, invalid cells with their first reason."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"dspark bench: {summary.protocol} (baseline: {summary.baseline})")
    t.add_column("concurrency", justify="right")
    t.add_column("arm")
    t.add_column("output tok/s", justify="right")
    t.add_column("speedup", justify="right")
    t.add_column("accept len", justify="right")
    t.add_column("valid")
    for cell in summary.cells:
        verdict = "[green]yes[/]" if cell.valid else f"[red]NO[/]: {escape(cell.reasons[0])}"
        if len(cell.reasons) > 1:
            verdict += f" (+{len(cell.reasons) - 1} more)"
        t.add_row(
            str(cell.concurrency),
            cell.arm,
            _num(cell.output_throughput, ".1f") if cell.valid else "[dim]"
            + _num(cell.output_throughput, ".1f")
            + "[/]",
            _num(cell.speedup, ".3f") + ("x" if cell.speedup is not None else ""),
            _num(cell.acceptance_length, ".2f"),
            verdict,
        )
    return t
