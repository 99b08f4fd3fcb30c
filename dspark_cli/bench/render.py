"""The bench summary drawn. For the terminal: one row per arm and concurrency (its repeats
aggregated), invalid repeats with their reason, and the results sentence under the table.

As the protocol's picture (summary.png, `plot`): output throughput per arm and speedup over the
baseline, both against concurrency, with their intervals as error bars when there are repeats.
Valid cells are drawn as lines; an invalid cell is a red cross, never a line point; a cell whose
GPUs throttled or sat idle in its measured phase is ringed in black (summary.json's `gpu_flags`
say which and why)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.bench import proposal, stats
from dspark_cli.bench.stats import Interval
from dspark_cli.bench.summary import ArmResult, Summary
from dspark_cli.launch.secrets import redact_text
from dspark_cli.paths import SUMMARY_PNG
from dspark_cli.untrusted import png_bytes, printable, write_atomic

if TYPE_CHECKING:
    from rich.console import RenderableType


def for_terminal(summary: Summary, markup: bool = True) -> Summary:
    """`summary` with every text read back from a record as the terminal (or a picture) may
    show it: redacted, control characters escaped (`untrusted.printable`), and with `markup`
    rich's markup escaped (an arm named `[/x]` is text, not a tag; the reasons are escaped
    where they are rendered)."""
    from rich.markup import escape

    def shown(value: Any, markup: bool = True) -> Any:
        if type(value) is str:  # not an enum's member: a verdict stays a verdict
            text = printable(redact_text(value))
            return escape(text) if markup else text
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.replace(value, **{
                f.name: shown(getattr(value, f.name), markup and f.name != "reasons")
                for f in dataclasses.fields(value) if f.init})
        if isinstance(value, tuple | list):
            return type(value)(shown(v, markup) for v in value)
        if isinstance(value, dict):
            return {shown(k, markup): shown(v, markup) for k, v in value.items()}
        return value

    return shown(summary, markup)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _interval(iv: stats.Interval | None, fmt: str, unit: str = "") -> str:
    if iv is None:
        return "-"
    point = format(iv.estimate, fmt) + unit
    if iv.low is None or iv.high is None:
        return point
    return f"{point} [{format(iv.low, fmt)}, {format(iv.high, fmt)}]"


def _latency(result: ArmResult, metric: str) -> str:
    ps = result.latency_ms.get(metric, {})
    return f"{_num(ps.get('p50'), '.1f')} / {_num(ps.get('p99'), '.1f')}"


def _validity(summary: Summary, result: ArmResult) -> str:
    degraded = [c for c in summary.cells if (c.variant, c.concurrency) == (result.arm,
                                                                       result.concurrency)
                and c.degraded]
    return _valid(summary, result) + (f" [yellow]DEGRADED ({len(degraded)})[/]" if degraded
                                      else "")


def _valid(summary: Summary, result: ArmResult) -> str:
    from rich.markup import escape

    if not result.invalid:
        return "[green]yes[/]"
    bad = [c for c in summary.cells
           if (c.variant, c.concurrency) == (result.arm, result.concurrency) and not c.valid]
    reasons = [r for c in bad for r in c.reasons]
    head = "[red]NO[/]" if not result.throughputs else \
        f"[red]{result.invalid} of {len(result.repeats)} NO[/]"
    text = f"{head}: {escape(reasons[0])}" if reasons else head
    return text + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else "")


def table(summary: Summary) -> RenderableType:
    """The terminal view: per arm and concurrency, the mean throughput with its interval, the
    speedup with its interval and verdict, and validity; then acceptance and latency; then the
    results sentence."""
    from rich.console import Group
    from rich.table import Table

    pct = f"{stats.CONFIDENCE:.0%}"
    t = Table(title=f"dspark bench: {summary.protocol} (baseline: {summary.baseline}; "
              f"{summary.repeats} repeat{'s' if summary.repeats != 1 else ''}; equivalence "
              f"margin {summary.equivalence_margin:.0%})")
    t.add_column("concurrency", justify="right")
    t.add_column("arm")
    t.add_column("n", justify="right")
    t.add_column(f"output tok/s [{pct}]", justify="right")
    t.add_column(f"speedup [{pct}]", justify="right")
    t.add_column("verdict")
    t.add_column("valid")
    lat = Table(title="acceptance and latency (means over valid repeats)")
    lat.add_column("concurrency", justify="right")
    lat.add_column("arm")
    lat.add_column("accept len", justify="right")
    lat.add_column("acc/draft", justify="right")
    for metric in ("TTFT", "TPOT", "ITL"):
        lat.add_column(f"{metric} p50/p99 ms", justify="right")
    for result in summary.results:
        sp = summary.speedup(result.arm, result.concurrency)
        ratio = sp.result.ratio if sp and sp.result else None
        verdict = "baseline" if result.arm == summary.baseline else \
            "-" if sp is None else stats.words(sp.result) if sp.result else str(sp.verdict)
        t.add_row(
            str(result.concurrency),
            result.arm,
            str(len(result.throughputs)),
            _interval(result.throughput, ".1f") if result.throughputs else
            "[dim]" + _num(_raw_throughput(summary, result), ".1f") + "[/]",
            _interval(ratio, ".3f", "x"),
            verdict,
            _validity(summary, result),
        )
        lat.add_row(
            str(result.concurrency),
            result.arm,
            _num(result.acceptance_length, ".2f"),
            _num(result.accepted_per_draft, ".2f"),
            *(_latency(result, m) for m in ("ttft", "tpot", "itl")),
        )
    return Group(t, lat, *_gpus(summary), *_lossless(summary),
                 *proposal.tables(summary), summary.results_sentence)


def _gpus(summary: Summary) -> list[RenderableType]:
    """Per sampled cell its GPUs' means in the measured phase, and any that throttled or sat
    idle there (in red: a number such a GPU produced is not the hardware's)."""
    from rich.table import Table

    sampled = [c for c in summary.cells if c.gpus]
    if not sampled:
        return []
    t = Table(title="GPUs in the measured phase (means over each cell's GPUs)")
    for name in ("cell", "GPUs", "util %", "power W", "SM MHz", "flags"):
        t.add_column(name, justify="left" if name in ("cell", "flags") else "right")
    for c in sampled:
        means = c.gpus["means"] if c.gpus else {}
        t.add_row(c.cell_id, str(c.gpus["gpus"] if c.gpus else "-"),
                  _num(means.get("utilization_pct"), ".1f"), _num(means.get("power_w"), ".1f"),
                  _num(means.get("sm_clock_mhz"), ".0f"),
                  "[red]" + "; ".join(c.gpu_flags) + "[/]" if c.gpu_flags else "none")
    return [t]


def _lossless(summary: Summary) -> list[RenderableType]:
    """Per arm: its greedy sequences identical to the reference's, and the first divergence."""
    from rich.table import Table

    rows = summary.as_dict()["lossless"]
    if not rows:
        return []
    t = Table(title=f"lossless at temperature 0 (against {rows[0]['reference']})")
    for name in ("arm", "compared by", "cells", "identical", "first divergence", "below"):
        t.add_column(name)
    for r in rows:
        first = r["first_divergence"]
        t.add_row(r["arm"], str(r["compared_by"] or "-"), str(r["cells"]),
                  f"{r['identical']} of {r['total']}",
                  "-" if not first else f"{first['cell']} prompt {first['prompt']} "
                  f"index {first['index']}",
                  "[red]" + ", ".join(r["below"]) + "[/]" if r["below"] else "none")
    return [t]


def _raw_throughput(summary: Summary, result: ArmResult) -> float | None:
    """An all-invalid cell's measured number (dimmed: it counts nowhere)."""
    raw = [c.output_throughput for c in summary.cells
           if (c.variant, c.concurrency) == (result.arm, result.concurrency)
           and c.output_throughput is not None]
    return sum(raw) / len(raw) if raw else None


def _errors(intervals: list[Interval]) -> list[list[float]]:
    """matplotlib's asymmetric error bars; zero where an interval has no bounds."""
    return [[iv.estimate - iv.low if iv.low is not None else 0.0 for iv in intervals],
            [iv.high - iv.estimate if iv.high is not None else 0.0 for iv in intervals]]


def plot(summary: Summary, directory: Path) -> Path:
    """Write summary.png into `directory` (matplotlib's Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False  # names from records are no TeX
    import matplotlib.pyplot as plt

    fig, (ax_tp, ax_sp) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    invalid_label = "invalid cell"
    colour = {arm: f"C{i}" for i, arm in enumerate(summary.arms)}  # one per arm, both panels
    for arm in summary.arms:
        results = sorted((r for r in summary.results if r.arm == arm and r.throughput),
                         key=lambda r: r.concurrency)
        ax_tp.errorbar(
            [r.concurrency for r in results],
            [r.throughput.estimate for r in results if r.throughput],
            yerr=_errors([r.throughput for r in results if r.throughput]),
            marker="o",
            capsize=3,
            color=colour[arm],
            label=arm + (" (baseline)" if arm == summary.baseline else ""),
        )
        bad = [c for c in summary.cells
               if c.variant == arm and not c.valid and c.output_throughput is not None]
        if bad:
            ax_tp.scatter(
                [c.concurrency for c in bad],
                [c.output_throughput for c in bad],
                marker="x",
                color="red",
                label=invalid_label,
                zorder=3,
            )
            invalid_label = "_nolegend_"
    flagged = [c for c in summary.cells if c.gpu_flags and c.output_throughput is not None]
    if flagged:
        ax_tp.scatter([c.concurrency for c in flagged], [c.output_throughput for c in flagged],
                      s=160, facecolors="none", edgecolors="black", linewidths=2, zorder=4,
                      label="GPU throttled or idle")
    for arm in summary.arms:
        if arm == summary.baseline:
            continue
        points = sorted(
            ((s.concurrency, s.result.ratio) for s in summary.speedups
             if s.arm == arm and s.result is not None),
            key=lambda p: p[0],
        )
        ax_sp.errorbar([p[0] for p in points], [p[1].estimate for p in points],
                       yerr=_errors([p[1] for p in points]), marker="o", capsize=3,
                       color=colour[arm], label=arm)
    ax_sp.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax_tp.set(
        title="Output throughput",
        xlabel="concurrency",
        ylabel="output tokens/s",
        xscale="log",
    )
    ax_sp.set(
        title=f"Speedup over {summary.baseline}",
        xlabel="concurrency",
        ylabel="x baseline output throughput",
        xscale="log",
    )
    for ax in (ax_tp, ax_sp):
        ax.set_xticks(list(summary.concurrencies), [str(c) for c in summary.concurrencies])
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    bars = f"; error bars: {stats.CONFIDENCE:.0%} intervals" if summary.repeats > 1 else ""
    fig.suptitle(f"dspark bench: {summary.protocol} ({summary.repeats} repeat"
                 f"{'s' if summary.repeats != 1 else ''} per cell{bars})")
    path = write_atomic(directory / SUMMARY_PNG, png_bytes(fig, dpi=110))
    plt.close(fig)
    return path
