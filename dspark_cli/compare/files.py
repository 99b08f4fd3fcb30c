"""A comparison on disk and on the terminal: compare.json, compare.png (B/A per cell with its
interval; needs the `plot` extra), and the text a person reads."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from dspark_cli.bench import verdicts
from dspark_cli.compare.runs import Comparison
from dspark_cli.run_files import COMPARE_JSON, COMPARE_PNG

_SHOWN_CHANGES = 40


def _ratio(c) -> str:
    if c.result is None:
        return f"- ({c.note})"
    iv = c.result.ratio
    bounds = f" [{iv.low:.3f}, {iv.high:.3f}]" if iv.bounded else ""
    return f"{iv.estimate:.3f}x{bounds} {verdicts.words(c.result)}"


def render(found: Comparison) -> str:
    lines = [f"dspark compare: {found.protocol}: B={found.b} over A={found.a} "
             f"(95% intervals; slower means beyond the {found.margin:.0%} margin)", "",
             f"What changed ({len(found.changes)}):"]
    for ch in found.changes[:_SHOWN_CHANGES]:
        lines.append(f"  {ch.key}: {ch.a!r} -> {ch.b!r}")
    if len(found.changes) > _SHOWN_CHANGES:
        lines.append(f"  ... {len(found.changes) - _SHOWN_CHANGES} more in {COMPARE_JSON}")
    if not found.changes:
        lines.append("  nothing: same config, launch, runtime, image and checkpoint")
    lines += ["", f"{'arm':<16} {'conc':>5}  {'metric':<18} B/A"]
    lines += [f"{c.arm:<16} {c.concurrency:>5}  {c.metric:<18} {_ratio(c)}" for c in found.cells]
    for side, cells in found.only.items():
        if cells:
            lines.append(f"only in {side.upper()}: {', '.join(cells)}")
    slower = [f"{c.arm} c{c.concurrency} ({c.metric})" for c in found.cells if c.slower]
    lines += ["", "gate: " + ("passed: no cell got slower" if found.passed
                              else f"FAILED: slower: {', '.join(slower)}")]
    return "\n".join(lines) + "\n"


def plot(found: Comparison, directory: Path) -> Path:
    """B/A per arm against concurrency, 95% interval bars, the margin shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    for ax, metric in zip(axes, ("output_throughput", "output_goodput"), strict=True):
        mine = [c for c in found.cells if c.metric == metric and c.result is not None]
        for i, arm in enumerate(dict.fromkeys(c.arm for c in mine)):
            pts = sorted((c for c in mine if c.arm == arm), key=lambda c: c.concurrency)
            ivs = [c.result.ratio for c in pts if c.result]
            ax.errorbar([c.concurrency for c in pts], [iv.estimate for iv in ivs],
                        yerr=[[iv.estimate - iv.low if iv.low is not None else 0 for iv in ivs],
                              [iv.high - iv.estimate if iv.high is not None else 0
                               for iv in ivs]],
                        marker="o", capsize=3, color=f"C{i}", label=arm)
        ax.axhspan(1 - found.margin, 1 + found.margin, color="grey", alpha=0.15,
                   label=f"+-{found.margin:.0%} margin")
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set(title=f"{metric.replace('_', ' ')}: B / A", xlabel="concurrency",
               ylabel="x run A", xscale="log")
        ax.grid(True, alpha=0.3)
        if mine:
            ax.legend()
    fig.suptitle(f"dspark compare: {found.protocol}")
    path = directory / COMPARE_PNG
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(found: Comparison, directory: Path) -> list[Path]:
    """compare.json and, with matplotlib installed, compare.png into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / COMPARE_JSON
    path.write_text(json.dumps(found.to_dict(), indent=2) + "\n")
    out = [path]
    if importlib.util.find_spec("matplotlib"):
        out.append(plot(found, directory))
    return out
