"""A comparison on disk and on the terminal: compare.json, compare.png (B/A per cell with its
interval; needs the `plot` extra), and the text a person reads. Every string that came from a
record is redacted (the comparison's facts already are) and, on the terminal, its control
characters escaped (`untrusted.printable`): no record can forge a line such as the gate's."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from dspark_cli.bench import verdicts
from dspark_cli.compare.runs import Comparison
from dspark_cli.launch.secrets import redact_text, redacted
from dspark_cli.run_files import COMPARE_JSON, COMPARE_PNG
from dspark_cli.untrusted import output_dir, png_bytes, printable, write_atomic

_SHOWN_CHANGES = 40
_SHOWN_VALUE = 160  # characters of one changed value on the terminal (compare.json has all)


def shown(value: Any) -> str:
    """A record's value as one terminal line: redacted, control characters escaped."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = printable(redact_text(text))
    return text if len(text) <= _SHOWN_VALUE else text[:_SHOWN_VALUE - 3] + "..."


def _x(value: float) -> str:
    return f"{value:.3f}" if abs(value) < 1e6 else f"{value:.3g}"


def _ratio(c) -> str:
    if c.result is None:
        return f"- ({shown(c.note)})"
    iv = c.result.ratio
    bounds = f" [{_x(iv.low)}, {_x(iv.high)}]" if iv.low is not None and iv.high is not None \
        else ""
    return f"{_x(iv.estimate)}x{bounds} {verdicts.words(c.result)}"


def _why_failed(found: Comparison) -> str:
    slower = [f"{printable(c.arm)} c{c.concurrency} ({c.metric})" for c in found.cells
              if c.slower]
    unjudged = [f"{printable(c.arm)} c{c.concurrency} ({c.metric}: {c.note})"
                for c in found.cells if c.fails]
    parts = ([f"slower: {', '.join(slower)}"] if slower else []) + \
        ([f"not judged: {', '.join(unjudged)}"] if unjudged else [])
    if not any(c.result is not None for c in found.cells):
        parts.append("no cell of A was measured validly in both runs: nothing was compared")
    return "; ".join(parts)


def render(found: Comparison) -> str:
    lines = [f"dspark compare: {shown(found.protocol)}: B={shown(str(found.b))} over "
             f"A={shown(str(found.a))} (95% intervals; slower means beyond the {found.margin:.0%} "
             "margin)", "", f"What changed ({len(found.changes)}):"]
    for ch in found.changes[:_SHOWN_CHANGES]:
        lines.append(f"  {shown(ch.key)}: {shown(ch.a)} -> {shown(ch.b)}")
    if len(found.changes) > _SHOWN_CHANGES:
        lines.append(f"  ... {len(found.changes) - _SHOWN_CHANGES} more in {COMPARE_JSON}")
    if not found.changes:
        lines.append("  nothing: same protocol, config, launch, runtime, image and checkpoint")
    lines += ["", f"{'arm':<16} {'conc':>5}  {'metric':<18} B/A"]
    lines += [f"{shown(c.arm):<16} {c.concurrency:>5}  {c.metric:<18} {_ratio(c)}"
              for c in found.cells]
    for side, cells in found.only.items():
        if cells:
            lines.append(f"only in {side.upper()}: {shown(', '.join(cells))}")
    if found.boot:
        lines += ["", f"Cold start (median cold_start.boot_s per arm; a growth beyond "
                  f"{found.boot_margin:.0%} is flagged, never gated):"]
        lines += [f"  {'FLAG ' if c.flagged else ''}{shown(c.sentence())}" for c in found.boot]
    lines += ["", "gate: " + ("passed: every cell A measured was measured by B, none slower"
                              if found.passed else f"FAILED: {_why_failed(found)}")]
    return "\n".join(lines) + "\n"


def _plot(found: Comparison) -> bytes:
    """B/A per arm against concurrency, 95% interval bars, the margin shaded."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False  # names from records are no TeX
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
                        marker="o", capsize=3, color=f"C{i % 10}", label=shown(arm))
        ax.axhspan(1 - found.margin, 1 + found.margin, color="grey", alpha=0.15,
                   label=f"+-{found.margin:.0%} margin")
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set(title=f"{metric.replace('_', ' ')}: B / A", xlabel="concurrency",
               ylabel="x run A", xscale="log")
        ax.grid(True, alpha=0.3)
        if mine:
            ax.legend()
    fig.suptitle(f"dspark compare: {shown(found.protocol)}")
    try:
        return png_bytes(fig, dpi=110)
    finally:
        plt.close(fig)


def write(found: Comparison, directory: Path) -> list[Path]:
    """compare.json and, with matplotlib installed, compare.png into `directory`, each
    replaced atomically (a link planted at either name is replaced, never written through)."""
    directory = output_dir(directory)
    out = [write_atomic(directory / COMPARE_JSON,
                        json.dumps(redacted(found.to_dict()), indent=2) + "\n")]
    if importlib.util.find_spec("matplotlib"):
        out.append(write_atomic(directory / COMPARE_PNG, _plot(found)))
    return out
