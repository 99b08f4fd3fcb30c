"""The report's decisions from a bench run (pure): goodput under the objectives per arm and
concurrency, the arm to run per load, the proposal that follows the crossover (recomputed from
the cells' winners, never the run's proposal.json; its preflight "not checked": the report runs
nothing), and the pictures to read them from. Rendered here too (`decisions_section`), record
strings through `markup`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dspark_cli.bench.proposal_files import NOT_CHECKED
from dspark_cli.report.markup import block, table, text
from dspark_cli.run_files import DECISIONS_PNG, PARETO_PNG


@dataclass(frozen=True)
class GoodputRow:
    concurrency: int
    arm: str
    goodput: str  # "mean [low, high]" output tokens/s
    share: str  # good requests, "mean% [low%, high%]"
    met: str  # "2 of 2" repeats met the objective


@dataclass(frozen=True)
class WinnerRow:
    concurrency: int
    run: str  # the arm, or "no clear winner"
    why: str


@dataclass(frozen=True)
class Decisions:
    objectives: str | None  # "p99 of requests within TTFT 2000 ms, TPOT 80 ms"
    metric: str
    goodput: tuple[GoodputRow, ...]
    winners: tuple[WinnerRow, ...]
    proposal: Mapping[str, Any] | None  # kind, statement, note, commands, validate_command
    pictures: tuple[tuple[str, str], ...]  # (caption, relative link)


def _iv(data: Any, scale: float = 1.0, fmt: str = ".1f", unit: str = "") -> str:
    if not isinstance(data, Mapping) or not isinstance(data.get("estimate"), int | float):
        return "-"
    point = format(data["estimate"] * scale, fmt) + unit
    lo, hi = data.get("low"), data.get("high")
    if not isinstance(lo, int | float) or not isinstance(hi, int | float):
        return point
    return f"{point} [{format(lo * scale, fmt)}, {format(hi * scale, fmt)}]"


def _words(obj: Mapping[str, Any]) -> str:
    limits = ", ".join(f"{m.upper()} {obj[f'{m}_ms']:g} ms" for m in ("ttft", "tpot", "e2el")
                       if isinstance(obj.get(f"{m}_ms"), int | float))
    return f"p{obj.get('percentile', 99):g} of requests within {limits}"


def _why(w: Mapping[str, Any]) -> str:
    if not w.get("arm"):
        kept = w.get("kept")
        return str(w.get("note") or "") + (f"; a proposal keeps {kept} here" if kept else "")
    s = w.get("runner_up")
    if not isinstance(s, Mapping):
        return "over every other arm"
    return f"{s.get('verdict')} than {s.get('baseline')} ({_iv(s.get('ratio'), fmt='.3f')}x)"


def _proposal(found: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if found is None:
        return None
    text = {k: str(found.get(k) or "") for k in ("kind", "statement", "note", "validate_command")}
    return {**text, "commands": [str(c) for c in found.get("commands") or ()],
            "preflight": NOT_CHECKED}


def decisions(summary: Mapping[str, Any], directory: Path, out_dir: str | None,
              proposal: Mapping[str, Any] | None = None) -> Decisions:
    """The section from the recomputed `summary` and `proposal` (`proposal_files.recompute`)."""
    obj = summary.get("objectives")
    rows = []
    if isinstance(obj, Mapping):
        for r in summary.get("results") or ():
            g = r.get("goodput") if isinstance(r, Mapping) else None
            if isinstance(g, Mapping):
                rows.append(GoodputRow(int(r["concurrency"]), str(r["arm"]),
                                       _iv(g.get("output_goodput")),
                                       _iv(g.get("share"), 100, ".0f", "%"),
                                       f"{g.get('met')} of {g.get('repeats')}"))
    found: Sequence[Any] = summary.get("winners") or ()
    winners = tuple(WinnerRow(int(w["concurrency"]), str(w.get("arm") or "no clear winner"),
                              _why(w)) for w in found if isinstance(w, Mapping))
    metric = str(found[0].get("metric")) if found and isinstance(found[0], Mapping) else ""
    pictures = tuple(
        (caption, os.path.relpath(p, out_dir) if out_dir else str(p))
        for caption, name in (("throughput and goodput vs concurrency", DECISIONS_PNG),
                              ("Pareto: per-user vs total output tokens/s", PARETO_PNG))
        if (p := directory / name).is_file() and not p.is_symlink())
    return Decisions(_words(obj) if isinstance(obj, Mapping) else None, metric, tuple(rows),
                     winners, _proposal(proposal), pictures)


def decisions_section(d: Decisions | None) -> list[str]:
    """Goodput under the objectives, the arm to run per load, the proposal and its pictures."""
    if d is None or not d.winners:
        return []
    lines = ["### Which configuration to run", ""]
    if d.goodput:
        lines += [f"Goodput: output tokens/s of the requests that met the objectives "
                  f"({text(d.objectives)}); 95% intervals over repeats.", ""]
        lines += table(("concurrency", "arm", "output goodput tok/s", "good requests",
                        "met the objective"),
                       [(g.concurrency, text(g.arm), g.goodput, g.share, g.met)
                        for g in d.goodput])
        lines.append("")
    lines += [f"The arm to run at each load: the best {text(d.metric)}, named only where the "
              "verdict says it is faster than every other arm.", ""]
    lines += table(("concurrency", "run", "why"),
                   [(w.concurrency, text(w.run), text(w.why)) for w in d.winners])
    lines.append("")
    p = d.proposal
    if p and p["kind"] != "none":
        lines += [f"**Proposal ({text(p['kind'])}):** {text(p['note'])}. "
                  f"{text(p['statement'])} Preflight: {text(p['preflight'])}.", ""]
        lines += block(p["commands"], "bash")
        if p["validate_command"]:
            lines += ["", "Validate it as one more arm:", "", *block([p["validate_command"]],
                                                                     "bash")]
        lines.append("")
    elif p:
        lines += [f"No proposal: {text(p['note'])}.", ""]
    for caption, link in d.pictures:
        lines += [f"![{caption}]({quote(link)})", ""]
    return lines
