"""The protocol's picture: output throughput per arm and speedup over the baseline, both against
concurrency, with their intervals as error bars when there are repeats. Valid cells are drawn as
lines; an invalid cell is a red cross, never a line point; a cell whose GPUs throttled or sat
idle in its measured phase is ringed in black (summary.json's `gpu_flags` say which and why).
"""

from __future__ import annotations

from pathlib import Path

from dspark_cli.bench import stats
from dspark_cli.bench.stats import Interval
from dspark_cli.bench.summary import Summary
from dspark_cli.run_files import SUMMARY_PNG
from dspark_cli.untrusted import png_bytes, write_atomic


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
