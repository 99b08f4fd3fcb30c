"""The protocol's picture: output throughput per arm and speedup over the baseline, both against
concurrency. Valid cells are drawn as lines; an invalid cell is a red cross, never a line point.
"""

from __future__ import annotations

from pathlib import Path

from dspark_cli.bench.summary import Summary

PLOT_PNG = "summary.png"


def plot(summary: Summary, directory: Path) -> Path:
    """Write summary.png into `directory` (matplotlib's Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_tp, ax_sp) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    invalid_label = "invalid cell"
    for arm in summary.arms:
        cells = sorted((c for c in summary.cells if c.arm == arm), key=lambda c: c.concurrency)
        valid = [c for c in cells if c.valid and c.output_throughput is not None]
        ax_tp.plot(
            [c.concurrency for c in valid],
            [c.output_throughput for c in valid],
            marker="o",
            label=arm + (" (baseline)" if arm == summary.baseline else ""),
        )
        bad = [c for c in cells if not c.valid and c.output_throughput is not None]
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
    for arm in summary.arms:
        if arm == summary.baseline:
            continue
        points = sorted(
            (s.concurrency, s.speedup)
            for s in summary.speedups
            if s.arm == arm and s.speedup is not None
        )
        ax_sp.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=arm)
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
    fig.suptitle(f"dspark bench: {summary.protocol}")
    path = directory / PLOT_PNG
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
