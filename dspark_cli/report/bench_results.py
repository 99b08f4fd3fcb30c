"""The benchmark's sections: how it was measured (the protocol) and what it measured (each arm
at each concurrency over its repeats, with its speedup over the baseline), from the bench run's
records. Pure: records in, sections out; floats rounded here for stable renderings. The
Throughput Methodology and Results sections (with lossless and the decisions under them) are
rendered here too, record strings through `markup`.

The decisions (`decisions`): goodput under the objectives per arm and concurrency, the arm to
run per load, the proposal that follows the crossover (recomputed from the cells' winners, never
the run's proposal.json; its preflight "not checked": the report runs nothing), and the
pictures to read them from."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dspark_cli.bench import stats
from dspark_cli.bench.proposal_files import NOT_CHECKED
from dspark_cli.bench.protocol import variant
from dspark_cli.paths import CELLS_DIR, DECISIONS_PNG, PARETO_PNG
from dspark_cli.report.markup import UNKNOWN, block, code, known, table, text
from dspark_cli.report.sources import BenchRecords, lookup


@dataclass(frozen=True)
class Methodology:
    protocol: str
    dataset: str
    dataset_sha256: str
    requests: str
    sampling: str
    concurrency_order: tuple[int, ...]
    arms: tuple[str, ...]
    baseline: str
    repeats: int
    equivalence_margin: float | None
    cold_boot: str
    warmups: tuple[str, ...]
    validity_rules: tuple[str, ...]


@dataclass(frozen=True)
class ResultRow:
    """One arm at one concurrency over its repeats (bench/summary.py's result and speedup)."""

    arm: str
    throughput: float | None  # mean output tokens/s over the valid repeats
    low: float | None
    high: float | None
    n: int  # valid repeats
    acceptance_length: float | None
    accepted_per_draft: float | None
    latency_ms: Mapping[str, Mapping[str, float]]  # ttft/tpot/itl: p50, p99, ...
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    verdict: str  # "baseline" for the baseline arm
    note: str  # why there is no speedup, or which repeats it leaves out
    valid: bool  # every repeat valid
    reasons: tuple[str, ...]  # each invalid repeat's reasons
    degraded: tuple[str, ...] = ()  # families of lines where vLLM overrode what was asked


@dataclass(frozen=True)
class ResultTable:
    concurrency: int
    rows: tuple[ResultRow, ...]


@dataclass(frozen=True)
class LosslessRow:
    """One arm's greedy answers against the reference arm's (bench/lossless.py), all cells."""

    arm: str
    reference: str
    compared_by: str  # "token_ids" or "text"; "-" when nothing was compared
    cells: int  # cells compared
    identical: int  # sequences identical to the reference's, over those cells
    total: int
    share: float | None
    min_identical: float | None
    below: tuple[str, ...]  # cells below the share they need (invalid)
    first_divergence: str  # "cell, prompt P, index I", or "-"
    unchecked: int  # cells with answers but nothing to compare them with (or a failed probe)


@dataclass(frozen=True)
class Results:
    sentence: str
    baseline: str
    tables: tuple[ResultTable, ...]
    plot: str | None
    record: str
    lossless: tuple[LosslessRow, ...] = ()
    decisions: Decisions | None = None  # goodput, the arm per load, the proposal


# What `dspark_cli/bench/cell.py` judges every cell by.
VALIDITY_RULES = (
    "client and server generated-token counts match (vllm:generation_tokens_total delta)",
    "no preemptions (vllm:num_preemptions_total delta)",
    "every measured request completed, none failed",
    "no fatal line in the server log (GPU fault, hang, engine death, traceback)",
)


def _round(value: Any, places: int = 4) -> Any:
    return round(value, places) if isinstance(value, float) else value


def _protocol_config(bench: BenchRecords) -> Mapping[str, Any]:
    for arm in sorted(bench.arm_configs):
        if bench.arm_configs[arm].get("bench"):
            return bench.arm_configs[arm]["bench"]
    return {}


def _repeats(proto: Mapping[str, Any], summary: Mapping[str, Any] | None) -> int:
    """The protocol's repeats per cell (1 in records from before repeats existed)."""
    return int(proto.get("repeats") or (summary or {}).get("repeats") or 1)


def methodology(bench: BenchRecords | None) -> Methodology | None:
    if bench is None:
        return None
    proto = _protocol_config(bench)
    info = lookup(bench.cells[0], "protocol") if bench.cells else {}
    dataset: Mapping[str, Any] = next((c["dataset"] for c in bench.cells if c.get("dataset")), {})
    d = proto.get("dataset") or {}
    kind = d.get("kind") or dataset.get("kind")
    where = dataset.get("file") or d.get("path")
    described = f"{known(kind)}" + (f" {d['subset']}" if d.get("subset") else "") + (
        f" ({where})" if where else "") + (
        f", {d['input_tokens']} input tokens, seed {d.get('seed')}" if kind == "random" else "")
    sampling = proto.get("sampling") or {}
    warmups = tuple(
        f"{w['num_prompts']} requests at " + (
            f"concurrency {w['concurrency']}" if w.get("concurrency") is not None
            else "the cell concurrency") + f" with output length {w['output_tokens']}"
        for w in proto.get("warmups") or ())
    measured = proto.get("measured_prompts")
    return Methodology(
        protocol=known(proto.get("name") or lookup(info, "name")),
        dataset=described,
        dataset_sha256=known(dataset.get("sha256") or d.get("sha256"))
        if kind != "random" else "none (synthetic random prompts: nothing to pin)",
        requests=f"{measured} measured requests per cell" if measured else UNKNOWN,
        sampling=(f"temperature {sampling.get('temperature')}, top-p {sampling.get('top_p')}, "
                  f"maximum output length {sampling.get('max_output_tokens')}, ignore_eos "
                  f"{str(sampling.get('ignore_eos')).lower()}") if sampling else UNKNOWN,
        concurrency_order=tuple(int(c) for c in (proto.get("concurrencies")
                                                 or lookup(info, "concurrencies") or ())),
        arms=tuple(proto.get("arms") or lookup(info, "arms") or ()),
        baseline=known(proto.get("baseline") or lookup(info, "baseline")),
        repeats=_repeats(proto, bench.summary),
        equivalence_margin=_round(proto.get("equivalence_margin",
                                            (bench.summary or {}).get("equivalence_margin")), 4),
        cold_boot="each cell (and each repeat) boots its own cold server from the arm's launch; "
                  "within a concurrency the arms run in alternating order repeat by repeat "
                  "(A/B, then B/A)",
        warmups=(*warmups, f"{measured} measured requests at the cell concurrency"),
        validity_rules=VALIDITY_RULES,
    )


def _legacy_results(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A summary written before repeats: each cell is its arm's only repeat."""
    return [{"arm": c["arm"], "concurrency": c["concurrency"], "repeats": [1],
             "invalid_repeats": 0 if c.get("valid") else 1,
             "throughput": {"estimate": c["output_throughput"], "low": None, "high": None,
                            "n": 1} if c.get("valid") and c.get("output_throughput") else None,
             "acceptance_length": c.get("acceptance_length"), "accepted_per_draft": None,
             "latency_ms": {}} for c in summary.get("cells") or ()]


def _speedups(summary: Mapping[str, Any]) -> dict[tuple[str, int], Mapping[str, Any]]:
    """Each recorded speedup in the statistics contract's form (`bench/stats.py`); a summary
    written before intervals existed has one plain ratio, which is one repeat: no verdict."""
    out = {}
    for s in summary.get("speedups") or ():
        if "ratio" not in s:
            ratio = None if s.get("speedup") is None else {
                "estimate": s["speedup"], "low": None, "high": None, "n": 1}
            s = {"arm": s["arm"], "baseline": summary["baseline"], "ratio": ratio,
                 "concurrency": s["concurrency"], "verdict": "inconclusive", "margin": 0.0,
                 "note": s.get("note") or ""}
        out[(str(s["arm"]), int(s["concurrency"]))] = s
    return out


def _row(result: Mapping[str, Any], speedup: Mapping[str, Any] | None, baseline: str,
         reasons: tuple[str, ...]) -> ResultRow:
    t = result.get("throughput") or {}
    ratio = (speedup or {}).get("ratio") or {}
    if result["arm"] == baseline:
        verdict, note = "baseline", ""
    elif speedup is None:
        verdict, note = "inconclusive", "no speedup recorded"
    else:
        verdict = stats.words(stats.Speedup.from_dict(dict(speedup))) \
            if speedup.get("ratio") else str(stats.Verdict.read(str(speedup["verdict"])))
        note = str(speedup.get("note") or "")
    latency = {m: {p: _round(v, 1) for p, v in sorted(ps.items())}
               for m, ps in sorted((result.get("latency_ms") or {}).items())}
    return ResultRow(
        str(result["arm"]), _round(t.get("estimate"), 2), _round(t.get("low"), 2),
        _round(t.get("high"), 2), int(t.get("n") or 0),
        _round(result.get("acceptance_length"), 3), _round(result.get("accepted_per_draft"), 3),
        latency, _round(ratio.get("estimate"), 3), _round(ratio.get("low"), 3),
        _round(ratio.get("high"), 3), verdict, note,
        not result.get("invalid_repeats") and bool(t), reasons)


def results_sentence(speedups: Mapping[tuple[str, int], Mapping[str, Any]]) -> str:
    """The results claim, generated by the verdict rule from the recorded speedups."""
    return stats.results_sentence([stats.Speedup.from_dict(dict(s))
                                      for _, s in sorted(speedups.items()) if s.get("ratio")])


def _cell_of(c: Mapping[str, Any], arm: str, concurrency: int) -> bool:
    """Whether summary cell `c` is of result `arm` (a variant: `<arm>+pc-off` with prefix
    caching off) at `concurrency`."""
    return (variant(str(c["arm"]), c.get("prefix_caching") is not False),
            int(c["concurrency"])) == (arm, concurrency)


def _reasons(summary: Mapping[str, Any], arm: str, concurrency: int) -> tuple[str, ...]:
    cells = [c for c in summary.get("cells") or ()
             if _cell_of(c, arm, concurrency) and not c.get("valid")]
    many = len({c.get("repeat", 1) for c in summary.get("cells") or ()}) > 1
    return tuple((f"repeat {c.get('repeat', 1)}: " if many else "") + r
                 for c in cells for r in c.get("reasons") or ())


def _degraded(summary: Mapping[str, Any], arm: str, concurrency: int) -> tuple[str, ...]:
    """The families of override lines (`logs.degraded`) this arm's cells showed."""
    lines = [str(line) for c in summary.get("cells") or ()
             if _cell_of(c, arm, concurrency)
             for line in c.get("degraded") or ()]
    return tuple(dict.fromkeys(line.split(":", 1)[0] for line in lines))


def results(bench: BenchRecords | None, out_dir: str | None) -> Results | None:
    if bench is None or bench.summary is None:
        return None
    summary = bench.summary
    baseline = str(summary["baseline"])
    speedups = _speedups(summary)
    results = summary.get("results") or _legacy_results(summary)
    order = {a: i for i, a in enumerate(summary.get("arms") or ())}
    tables = []
    for c in summary.get("concurrencies") or ():
        mine = sorted((r for r in results if int(r["concurrency"]) == c),
                      key=lambda r: order.get(r["arm"], len(order)))
        tables.append(ResultTable(int(c), tuple(
            replace(_row(r, speedups.get((str(r["arm"]), int(c))), baseline,
                         _reasons(summary, str(r["arm"]), int(c))),
                    degraded=_degraded(summary, str(r["arm"]), int(c))) for r in mine)))
    plot = None
    if bench.plot is not None:
        plot = os.path.relpath(bench.plot, out_dir) if out_dir else str(bench.plot)
    sentence = summary.get("results_sentence") or results_sentence(speedups)
    return Results(sentence, baseline, tuple(tables), plot, str(bench.directory / CELLS_DIR),
                   lossless_rows(summary), decisions(summary, bench.directory, out_dir,
                                                        bench.proposal))


def lossless_rows(summary: Mapping[str, Any]) -> tuple[LosslessRow, ...]:
    """The lossless table (summary.json's `lossless`, one entry per arm)."""
    rows = []
    for t in summary.get("lossless") or ():
        first = t.get("first_divergence")
        rows.append(LosslessRow(
            str(t["arm"]), str(t.get("reference")), str(t.get("compared_by") or "-"),
            int(t.get("cells") or 0), int(t.get("identical") or 0), int(t.get("total") or 0),
            _round(t.get("share"), 4), _round(t.get("min_identical"), 4),
            tuple(str(c) for c in t.get("below") or ()),
            f"{first['cell']}, prompt {first['prompt']}, index {first['index']}" if first
            else "-", int(t.get("unchecked") or 0) + int(t.get("probe_failed") or 0)))
    return tuple(rows)


def _num(value: float | None, places: int = 2) -> str:
    return "-" if value is None else f"{value:,.{places}f}"


def methodology_section(m: Methodology | None) -> list[str]:
    lines = ["## Throughput Methodology", ""]
    if m is None:
        return [*lines, "Not run: no bench record in the given run directories."]
    lines += [f"Protocol {code(m.protocol)}: {text(m.requests)}, arms "
              f"{text(', '.join(m.arms))}, speedups over {code(m.baseline)}.", "",
              f"- Dataset: {text(m.dataset)}", f"- Dataset SHA256: {text(m.dataset_sha256)}",
              f"- Sampling: {text(m.sampling)}",
              f"- Concurrency order: {', '.join(map(str, m.concurrency_order))}",
              f"- Repeats per cell: {m.repeats}" + (
                  f"; equivalence margin {m.equivalence_margin:.1%} (comparable only when the "
                  "speedup's 90% interval lies within it; faster or slower when its 95% "
                  "interval excludes 1 and the estimate is beyond it; else inconclusive, with "
                  "the smallest change the repeats could detect)"
                  if m.equivalence_margin is not None else ""),
              f"- Cold boot: {text(m.cold_boot)}", "",
              "Warmup and measurement, per cell:", ""]
    lines += [f"{i}. {text(w)}" for i, w in enumerate(m.warmups, 1)]
    lines += ["", "A result is valid only when:", ""]
    return [*lines, *(f"- {text(r)}" for r in m.validity_rules)]


def _interval(estimate: str, low: float | None, high: float | None,
              bound: Callable[[float], str]) -> str:
    """An estimate with its 95% interval, where the record has both bounds."""
    return estimate if low is None or high is None else f"{estimate} [{bound(low)}, {bound(high)}]"


def _throughput(r: ResultRow) -> str:
    if r.throughput is None:
        return "- (no valid repeat)"
    return _interval(_num(r.throughput), r.low, r.high, _num) + f" (n={r.n})"


def _speedup(r: ResultRow) -> str:
    if r.speedup is None:
        return "-"
    return _interval(f"{r.speedup:.3f}x", r.speedup_low, r.speedup_high, lambda v: f"{v:.3f}")


def _latency(r: ResultRow, metric: str) -> str:
    ps = r.latency_ms.get(metric) or {}
    if "p50" not in ps or "p99" not in ps:
        return "-"
    return f"{ps['p50']:,.1f} / {ps['p99']:,.1f}"


def _verdict(r: ResultRow) -> str:
    return text(f"{r.verdict} ({r.note})" if r.note else r.verdict)


def results_section(r: Results | None) -> list[str]:
    lines = ["## Results", ""]
    if r is None:
        return [*lines, "Not run: no bench summary in the given run directories."]
    lines += [text(r.sentence), ""]
    header = ("arm", "output tok/s, mean [95% CI] (n)", "acceptance length",
              "accepted per draft", "TTFT p50 / p99 ms", "TPOT p50 / p99 ms",
              f"speedup over {text(r.baseline)} [95% CI]", "verdict", "valid")
    for t in r.tables:
        lines += [f"### Concurrency {t.concurrency}", ""]
        lines += table(header, [
            (text(row.arm), _throughput(row), _num(row.acceptance_length, 3),
             _num(row.accepted_per_draft, 3), _latency(row, "ttft"), _latency(row, "tpot"),
             _speedup(row), _verdict(row),
             ("yes" if row.valid else "no: " + text("; ".join(row.reasons))) + (
                 f"; DEGRADED ({text(', '.join(row.degraded))}: vLLM overrode what was asked)"
                 if row.degraded else ""))
            for row in t.rows])
        lines.append("")
    if r.plot:
        lines += [f"![throughput and speedup vs concurrency]({quote(r.plot)})", ""]
    return [*lines, *_lossless(r.lossless), *decisions_section(r.decisions),
            f"Record: {code(r.record)}"]


def _share(share: float | None, needed: float | None) -> str:
    return ("-" if share is None else f"{share:.1%}") + (
        "" if needed is None else f" ({needed:.1%})")


def _lossless(rows: tuple[LosslessRow, ...]) -> list[str]:
    """Lossless at temperature 0: each arm's pinned greedy answers against the reference's."""
    if not rows:
        return []
    lines = ["### Lossless at temperature 0", "",
             f"Every cell answered the pinned greedy prompts after its measured phase; its "
             f"sequences are compared token for token with {code(rows[0].reference)}'s. A cell "
             "below the identity share it needs is invalid.", ""]
    lines += table(
        ("arm", "compared by", "cells", "identical sequences", "share (needed)",
         "first divergence", "cells below"),
        [(text(r.arm), text(r.compared_by),
          str(r.cells) + (f" (+{r.unchecked} unchecked)" if r.unchecked else ""),
          f"{r.identical} of {r.total}", _share(r.share, r.min_identical),
          text(r.first_divergence), text(", ".join(r.below) or "none")) for r in rows])
    return [*lines, ""]


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
