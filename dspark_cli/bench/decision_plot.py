"""The pictures a decision is read from: throughput and goodput against concurrency per arm
with their 95% intervals as bands (decisions.png), and the Pareto view, per-user output tokens/s
(throughput / concurrency) against total output tokens/s, one line per arm (pareto.png)."""

from __future__ import annotations

from pathlib import Path

from dspark_cli.bench.stats import Interval
from dspark_cli.bench.summary import ArmResult, Summary
from dspark_cli.run_files import DECISIONS_PNG, PARETO_PNG
from dspark_cli.untrusted import png_bytes, write_atomic


def _band(ax, xs: list[int], ivs: list[Interval], colour: str, label: str) -> None:
    ax.plot(xs, [iv.estimate for iv in ivs], marker="o", color=colour, label=label)
    lows = [iv.low if iv.low is not None else iv.estimate for iv in ivs]
    highs = [iv.high if iv.high is not None else iv.estimate for iv in ivs]
    ax.fill_between(xs, lows, highs, color=colour, alpha=0.2)


def _mine(summary: Summary, arm: str) -> list[ArmResult]:
    return sorted((r for r in summary.results if r.arm == arm and r.throughput),
                  key=lambda r: r.concurrency)


def plot(summary: Summary, directory: Path) -> tuple[Path, Path]:
    """Write decisions.png and pareto.png into `directory` (Agg: no display needed), each
    replaced atomically: a link planted at either name is replaced, never written through."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False  # names from records are no TeX
    import matplotlib.pyplot as plt

    panels = 2 if summary.objectives else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), constrained_layout=True,
                             squeeze=False)
    colour = {arm: f"C{i}" for i, arm in enumerate(summary.arms)}
    for arm in summary.arms:
        rows = _mine(summary, arm)
        _band(axes[0][0], [r.concurrency for r in rows],
              [r.throughput for r in rows if r.throughput], colour[arm], arm)
        if summary.objectives:
            good = [r for r in rows if r.goodput]
            _band(axes[0][1], [r.concurrency for r in good],
                  [r.goodput.output_goodput for r in good if r.goodput], colour[arm], arm)
    titles = ["output throughput", f"output goodput ({summary.objectives.words()})"
              if summary.objectives else ""]
    winners = {w.concurrency: w.arm for w in summary.winners if w.arm}
    for ax, title in zip(axes[0], titles, strict=False):
        ax.set(title=title, xlabel="concurrency (winner below)", ylabel="output tokens/s",
               xscale="log")
        ax.set_xticks(list(summary.concurrencies),
                      [f"{c}\n{winners.get(c, '-')}" for c in summary.concurrencies])
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.suptitle(f"dspark bench: {summary.protocol} (bands: 95% intervals over repeats)")
    decisions = write_atomic(directory / DECISIONS_PNG, png_bytes(fig, dpi=110))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.5), constrained_layout=True)
    for arm in summary.arms:
        rows = _mine(summary, arm)
        xs = [r.throughput.estimate for r in rows if r.throughput]
        ys = [r.throughput.estimate / r.concurrency for r in rows if r.throughput]
        ax.plot(xs, ys, marker="o", color=colour[arm], label=arm)
        for r, x, y in zip(rows, xs, ys, strict=False):
            ax.annotate(f"c{r.concurrency}", (x, y), textcoords="offset points", xytext=(4, 4),
                        fontsize=8)
    ax.set(title=f"Pareto: {summary.protocol}", xlabel="total output tokens/s",
           ylabel="output tokens/s per user (throughput / concurrency)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    pareto = write_atomic(directory / PARETO_PNG, png_bytes(fig, dpi=110))
    plt.close(fig)
    return decisions, pareto
