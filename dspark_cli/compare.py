"""`dspark compare`: what changed between two runs and whether any cell got slower.

Two run directories read back (through the report's record readers: untrusted input, nothing
outside them followed, summaries recomputed from the cells) and compared: refused when they do
not belong together (another protocol, model, request set, sampling or warmups), else what
changed and every cell's ratio B/A with its verdict, under the caller's margin.

What changed between two runs' records (pure): the protocol (from the cells, recomputed),
the arms' composed config, their exact launch (launch.sh), the runtime versions and pins, the
image, and the checkpoint's hashes, as flat `key: value` facts, so a difference reads as one
line each. Every value passes the secret filter (`secrets.redacted`) as it becomes a fact.

A comparison on disk and on the terminal: compare.json, compare.png (B/A per cell with its
interval; needs the `plot` extra), and the text a person reads. Every string that came from a
record is redacted (the comparison's facts already are) and, on the terminal, its control
characters escaped (`untrusted.printable`): no record can forge a line such as the gate's.

Run B over run A, per arm and concurrency (pure): the ratio of mean output throughput (and
of goodput, when both runs measured it under the same objectives) with its interval, judged by
the bench's own verdicts, so "slower" means what it means in a summary.

The gate is a contract, not a summary of what happened to be comparable: it fails when a cell
got slower beyond the caller's margin, when B has no valid measurement of a cell A measured
validly (B's cell missing, or every repeat of it invalid), when a ratio cannot be judged, and
when the runs share no cell at all.

Run B's cold start over run A's is judged here too, per arm: the median of the cells' recorded
`cold_start.boot_s` (launch to health, bench/cell.py), B over A. A growth beyond the caller's
boot margin is a flag among compare's findings, never a gate failure: a slower boot costs
minutes per deploy, not throughput, and one run's boots vary with caches a gate cannot see."""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean, median
from typing import Any

from dspark_cli.bench import stats
from dspark_cli.bench.protocol import variant
from dspark_cli.console import json_text
from dspark_cli.errors import UsageError
from dspark_cli.launch.secrets import redact, redact_text, redacted
from dspark_cli.paths import COMPARE_JSON, COMPARE_PNG
from dspark_cli.report.sources import BenchRecords, collect, lookup
from dspark_cli.untrusted import output_dir, png_bytes, printable, shown_path, write_atomic

METRICS = ("output_throughput", "output_goodput")


@dataclass(frozen=True)
class CellChange:
    arm: str
    concurrency: int
    metric: str
    result: stats.Speedup | None  # B over A; None: not judged (`note` says why)
    note: str = ""
    fails: bool = False  # not judged, and A measured it: the gate cannot pass over it

    @property
    def slower(self) -> bool:
        return self.result is not None and self.result.verdict is stats.Verdict.SLOWER

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "concurrency": self.concurrency, "metric": self.metric,
                "ratio": None if self.result is None else self.result.ratio.to_dict(),
                "verdict": None if self.result is None else str(self.result.verdict),
                "mde": None if self.result is None else self.result.mde, "note": self.note,
                "fails_gate": self.slower or self.fails}


def _values(result: Mapping[str, Any], metric: str) -> list[float]:
    """The valid repeats' numbers of one (recomputed) summary result."""
    raw = result.get("throughputs") if metric == "output_throughput" else \
        (result.get("goodput") or {}).get("output_goodputs")
    return [float(v) for v in raw or () if isinstance(v, int | float) and not isinstance(v, bool)
            and math.isfinite(v)]


def _results(summary: Mapping[str, Any]) -> dict[tuple[str, int], Mapping[str, Any]]:
    out = {}
    for r in summary.get("results") or ():
        if isinstance(r, Mapping) and isinstance(r.get("concurrency"), int):
            out[(str(r.get("arm")), int(r["concurrency"]))] = r
    return out


def _finite(s: stats.Speedup) -> bool:
    iv = s.ratio
    return all(v is None or math.isfinite(v) for v in (iv.estimate, iv.low, iv.high, s.mde))


def _one(key: tuple[str, int], metric: str, va: list[float], vb: list[float],
         margin: float) -> CellChange:
    a_ok, b_ok = bool(va) and fmean(va) > 0, bool(vb)
    if not a_ok:  # nothing of A's to hold B to: B cannot have got slower than nothing
        return CellChange(*key, metric, None, "no valid repeat in A")
    if not b_ok:
        return CellChange(*key, metric, None, "no valid repeat in B (A has one)", fails=True)
    try:
        found = stats.speedup("B", vb, "A", va, key[1], margin)
    except (ArithmeticError, ValueError):
        found = None
    if found is None or not _finite(found):
        return CellChange(*key, metric, None, "B/A cannot be computed from these numbers "
                          "(out of range)", fails=True)
    return CellChange(*key, metric, found)


def compare(a: Mapping[str, Any], b: Mapping[str, Any], margin: float,
            goodput: bool) -> tuple[CellChange, ...]:
    """Every (arm, concurrency) of A, in A's order, B over A (a cell only B has is not judged:
    `only_in_one` lists it)."""
    ra, rb = _results(a), _results(b)
    out = []
    for key in ra:
        for metric in METRICS if goodput else METRICS[:1]:
            va = _values(ra[key], metric)
            if key not in rb:
                if va:
                    out.append(CellChange(*key, metric, None, "not in B (A measured it)",
                                          fails=True))
                continue
            out.append(_one(key, metric, va, _values(rb[key], metric), margin))
    return tuple(out)


def only_in_one(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, list[str]]:
    """The cells one run has and the other does not ("arm c<concurrency>")."""
    ra, rb = _results(a), _results(b)
    return {"a": [f"{k[0]} c{k[1]}" for k in ra if k not in rb],
            "b": [f"{k[0]} c{k[1]}" for k in rb if k not in ra]}


def judged(found: Sequence[CellChange]) -> list[CellChange]:
    """The cells that were set against each other (both runs had valid repeats)."""
    return [c for c in found if c.result is not None]


def failures(found: Sequence[CellChange]) -> list[str]:
    """Why the gate fails ([] when it passes): each slower or unjudged cell, or no cell
    compared at all."""
    out = [f"{c.arm} c{c.concurrency} ({c.metric}): "
           + (f"slower ({c.result.ratio.estimate:.3f}x)" if c.slower and c.result else c.note)
           for c in found if c.slower or c.fails]
    if not judged(found):
        out.append("no cell of A was measured validly in both runs: nothing was compared")
    return out


def gate(found: Sequence[CellChange]) -> bool:
    """True when every cell A measured was measured by B, none got slower beyond the
    margin, and at least one was compared."""
    return not failures(found)


DEFAULT_BOOT_MARGIN = 0.25  # README: `dspark compare --boot-margin`
MAX_BOOT_MARGIN = 10.0


@dataclass(frozen=True)
class BootChange:
    arm: str
    a_s: float  # median cold_start.boot_s over the arm's cells in A
    b_s: float
    cells: tuple[int, int]  # how many cells of A and of B recorded one
    margin: float

    @property
    def growth(self) -> float | None:
        """B over A minus 1 (0.5: half again as long); None when A booted in no time."""
        return self.b_s / self.a_s - 1 if self.a_s > 0 else None

    @property
    def flagged(self) -> bool:
        return self.growth is not None and self.growth > self.margin

    def sentence(self) -> str:
        grew = "-" if self.growth is None else f"{self.growth:+.0%}"
        return (f"{self.arm}: cold start {self.a_s:.1f} s -> {self.b_s:.1f} s ({grew}; median "
                f"over {self.cells[0]} and {self.cells[1]} cells)")

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "a_boot_s": self.a_s, "b_boot_s": self.b_s,
                "a_cells": self.cells[0], "b_cells": self.cells[1],
                "growth": None if self.growth is None else round(self.growth, 4),
                "flagged": self.flagged}


def check_boot_margin(margin: float) -> float:
    """The caller's boot margin, a fraction in [0, 10]; UsageError (exit 2) otherwise."""
    if not (math.isfinite(margin) and 0 <= margin <= MAX_BOOT_MARGIN):
        raise UsageError(f"--boot-margin {margin!r} is out of range: the growth a cold start "
                         f"may show before it is flagged is a fraction from 0 to "
                         f"{MAX_BOOT_MARGIN:g}, e.g. 0.25 for 25%; nothing was compared.",
                         hint="dspark compare A B --boot-margin 0.25")
    return float(margin)


def _boots(cells: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for c in cells:
        cold = c.get("cold_start")
        boot = cold.get("boot_s") if isinstance(cold, Mapping) else None
        if isinstance(boot, int | float) and not isinstance(boot, bool):
            # a variant with prefix caching off is its own arm (`<arm>+pc-off`)
            out.setdefault(variant(str(c.get("arm")), c.get("prefix_caching") is not False),
                           []).append(float(boot))
    return out


def boot_changes(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]],
                 margin: float) -> tuple[BootChange, ...]:
    """Every arm both runs recorded a cold start of, in A's order."""
    ba, bb = _boots(a), _boots(b)
    return tuple(BootChange(arm, median(ba[arm]), median(bb[arm]),
                            (len(ba[arm]), len(bb[arm])), margin)
                 for arm in ba if arm in bb)


def flags(found: Sequence[BootChange]) -> list[str]:
    """One line per arm whose cold start grew beyond the margin."""
    return [f"{c.sentence()}: grew beyond the {c.margin:.0%} boot margin" for c in found
            if c.flagged]


# Config keys that differ between any two runs without changing what ran (each arm's run
# record names the arm, concurrency and repeat it was composed for).
_VOLATILE = ("hydra", "bench.arm", "bench.concurrency", "bench.repeat")
# The protocol as its cells recorded it (the summary recomputed from them).
_PROTOCOL = ("protocol", "arms", "baseline", "concurrencies", "repeats", "equivalence_margin",
             "objectives", "prefix_caching")


@dataclass(frozen=True)
class Change:
    key: str  # "config.<arm>.serving.args.max_num_seqs", "runtime.vllm_version", ...
    a: Any
    b: Any

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "a": self.a, "b": self.b}


def _flat(prefix: str, node: Any, out: dict[str, Any]) -> None:
    if isinstance(node, Mapping):
        for k, v in node.items():
            _flat(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = node


def _volatile(key: str) -> bool:
    return any(key == v or key.startswith(v + ".") for v in _VOLATILE)


def facts(bench: BenchRecords) -> dict[str, Any]:
    """Everything a comparison names, flattened and redacted; the same for the same records."""
    out: dict[str, Any] = {}
    for field in _PROTOCOL:
        out[f"protocol.{field}"] = (bench.summary or {}).get(field)
    for arm, cfg in sorted(bench.arm_configs.items()):
        flat: dict[str, Any] = {}
        _flat("", redact(dict(cfg)), flat)
        for key, value in flat.items():
            if not _volatile(key.lstrip(".")):
                out[f"config.{arm}{key}"] = value
    for arm, text in sorted(bench.arm_launches.items()):
        for i, line in enumerate(text.split("\n"), 1):  # a shell's lines: \n only
            if line.strip() and not line.lstrip().startswith("#"):
                out[f"launch.{arm}:{i}"] = line.strip()
    for arm, prov in sorted(bench.arm_provenance.items()):
        for group in ("runtime", "packages", "checkpoint", "torch_backends"):
            node = prov.get(group)
            if isinstance(node, Mapping):
                _flat(f"{group}.{arm}", redact(dict(node)), out)
        image = (((bench.arm_configs.get(arm) or {}).get("deploy") or {}).get("k8s") or {})
        if isinstance(image, Mapping) and image.get("image"):
            out[f"image.{arm}"] = image["image"]
    return redacted(out)


def _arm(key: str) -> str:
    """The arm a fact belongs to ("config.<arm>.x", "launch.<arm>:3", "runtime.<arm>.x")."""
    return key.split(".", 1)[1].split(".", 1)[0].split(":", 1)[0] if "." in key else ""


def changes(a: BenchRecords, b: BenchRecords) -> tuple[Change, ...]:
    """Every fact whose value differs, or that only one run has, in key order; an arm only one
    run has is one change (the arms), not each of its facts."""
    arms_a, arms_b = sorted(a.arm_configs), sorted(b.arm_configs)
    shared = set(arms_a) & set(arms_b)
    fa, fb = facts(a), facts(b)
    found = [Change(k, fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb))
             if fa.get(k) != fb.get(k) and (_arm(k) in shared or k.startswith("protocol."))]
    return (*((Change("arms", arms_a, arms_b),) if arms_a != arms_b else ()), *found)


DEFAULT_MARGIN = 0.05  # README: `dspark compare --margin`


@dataclass(frozen=True)
class Comparison:
    a: Path
    b: Path
    protocol: str
    margin: float  # the caller's (`--margin`), never a record's
    changes: tuple[Change, ...]
    cells: tuple[CellChange, ...]
    only: dict[str, list[str]]
    boot: tuple[BootChange, ...] = ()  # cold start per arm: flagged, never gated
    boot_margin: float = DEFAULT_BOOT_MARGIN

    @property
    def flags(self) -> list[str]:
        return flags(self.boot)

    @property
    def failures(self) -> list[str]:
        return failures(self.cells)

    @property
    def passed(self) -> bool:
        return gate(self.cells)

    def to_dict(self) -> dict[str, Any]:
        return {"a": shown_path(self.a), "b": shown_path(self.b), "protocol": self.protocol,
                "margin": self.margin, "passed": self.passed,
                "slower": [f"{c.arm} c{c.concurrency} {c.metric}" for c in self.cells
                           if c.slower],
                "failures": self.failures, "boot_margin": self.boot_margin,
                "flags": self.flags, "cold_start": [c.to_dict() for c in self.boot],
                "changes": [c.to_dict() for c in self.changes],
                "cells": [c.to_dict() for c in self.cells], "only_in": self.only}


def check_margin(margin: float) -> float:
    """The caller's equivalence margin, a fraction in [0, 1); UsageError (exit 2) otherwise."""
    if not 0 <= margin < 1:  # NaN fails too
        raise UsageError(f"--margin {margin!r} is out of range: the equivalence margin is a "
                         "fraction from 0 (inclusive) to 1 (exclusive), e.g. 0.05 for 5%; "
                         "nothing was compared.", hint="dspark compare A B --margin 0.05")
    return float(margin)


def _bench(directory: Path) -> BenchRecords:
    bench = collect([directory]).bench
    if bench is None or bench.summary is None:
        raise UsageError(f"{shown_path(directory)} holds no bench cells (cells/*/cell.json); "
                         "a comparison sets two bench runs against each other.",
                         hint="give two `dspark bench` or `dspark validate` run directories")
    return bench


def _recorded(cell: Mapping[str, Any], *path: str) -> str | None:
    value = lookup(cell, *path)
    return value if isinstance(value, str) else None


def _models(bench: BenchRecords) -> set[str]:
    """The models the run's arms were composed for and its cells measured."""
    found = {str(m) for c in bench.arm_configs.values()
             if (m := lookup(c, "model", "path")) is not None}
    return found | {m for c in bench.cells if (m := _recorded(c, "launch", "plan", "model_path"))}


def _requests(bench: BenchRecords) -> set[str]:
    """The request sets the run's cells measured (the dataset's sha256, else its file)."""
    return {d for c in bench.cells
            if (d := _recorded(c, "dataset", "sha256") or _recorded(c, "dataset", "file"))}


def _listed(values: set[str]) -> str:
    return ", ".join(sorted(values)) or "none recorded"


def _refuse_apart(a: BenchRecords, b: BenchRecords) -> None:
    """UsageError naming why two runs' numbers cannot be set against each other."""
    sa, sb = a.summary or {}, b.summary or {}
    why = []
    if sa.get("protocol") != sb.get("protocol"):
        why.append(f"different protocols ({sa.get('protocol')!r} and {sb.get('protocol')!r})")
    if _models(a) != _models(b):
        why.append(f"different models ({_listed(_models(a))} and {_listed(_models(b))})")
    if _requests(a) != _requests(b):
        why.append(f"different request sets (datasets {_listed(_requests(a))} and "
                   f"{_listed(_requests(b))})")
    for key in ("sampling", "dataset", "measured_prompts", "warmups"):
        pa = [lookup(c, "bench", key) for c in a.arm_configs.values()][:1]
        pb = [lookup(c, "bench", key) for c in b.arm_configs.values()][:1]
        if pa and pb and pa != pb:
            why.append(f"a different bench.{key} ({pa[0]} and {pb[0]})")
    if why:
        raise UsageError(printable(redact_text(
            f"{shown_path(a.directory)} and {shown_path(b.directory)} do not belong together: "
            f"{'; '.join(why)}; a comparison sets one protocol on one model and one request "
            "set against itself.")),
                         hint="compare two runs of the same protocol, model and dataset")


def compare_runs(a_dir: Path, b_dir: Path, margin: float = DEFAULT_MARGIN,
                 boot_margin: float = DEFAULT_BOOT_MARGIN) -> Comparison:
    margin, boot_margin = check_margin(margin), check_boot_margin(boot_margin)
    a, b = _bench(a_dir), _bench(b_dir)
    _refuse_apart(a, b)
    sa, sb = a.summary or {}, b.summary or {}
    goodput = sa.get("objectives") is not None and sa.get("objectives") == sb.get("objectives")
    return Comparison(a.directory, b.directory, str(sa.get("protocol")), margin,
                      changes(a, b), compare(sa, sb, margin, goodput), only_in_one(sa, sb),
                      boot_changes(a.cells, b.cells, boot_margin), boot_margin)


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
    return f"{_x(iv.estimate)}x{bounds} {stats.words(c.result)}"


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
                        json_text(redacted(found.to_dict())))]
    if importlib.util.find_spec("matplotlib"):
        out.append(write_atomic(directory / COMPARE_PNG, _plot(found)))
    return out
