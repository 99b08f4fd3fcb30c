"""The report's evidence of what the runs did, beside whether they passed. Pure: records in,
sections out; each rendered here too, record strings through `markup`.

The watches of every bench cell (`watches`: type-checked cell records in, Markdown lines out):
per-position acceptance per arm and concurrency with the request set it came from (a warning for
random tokens), arms that accept (almost) nothing, the cold start per arm in the phases its log
shows and which of the boot's caches hit (with the load-generator processes), each cell's GPUs
under load, and cells that stalled or fell back (docs/bench.md, "Watches").

The engagement per arm (`engagement_rows`), from the bench cells' records: whether vLLM's own
per-request speculative-decoding metrics showed what the arm's launch expects (adaptive
verification trims some steps below K; a fixed-K drafter proposes K every step), and the DSpark
draft's parameter count against its pin. Every outcome is recomputed from the section's counts
(`metrics.judge` on the steps, the draft's parameters against the pin), never taken from the
record's `ok` or sentence: "0 of 340 steps below K" is no engagement, 96 parameters against a
pin of 97 a mismatch. The smoke's `engagement` and `draft_params` checks are in the smoke
section's table.

What the server logs showed (`findings`), from the smoke and bench records: the evidence lines
of the features the profile asks for (`logs.evidence`: breakable CUDA graphs,
`use_flattening=True`), and the faults ruled out (the fatal-line families each log was scanned
for, and what matched)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean, median
from typing import Any

from dspark_cli.bench.protocol import variant
from dspark_cli.report.markup import code, table, text
from dspark_cli.report.markup import table as md_table
from dspark_cli.report.sources import BenchRecords, SmokeRecords, lookup
from dspark_cli.server.metrics import FULL_K, Engagement, Judgement, judge

WATCHES_TITLE = "### Watches"
PHASE_COLUMNS = (("before_first_line_s", "before the first log line"),
                 ("engine_started", "to engine"), ("weights_loaded", "weights"),
                 ("graphs_captured", "graph capture (+ adaptive profile)"),
                 ("engine_ready", "engine init"), ("api_ready", "API up"))


def _num(value: Any, places: int = 1) -> str:
    return "-" if not isinstance(value, int | float) or isinstance(value, bool) else (
        f"{value:,.{places}f}")


def _section(cell: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = cell.get(key)
    return value if isinstance(value, Mapping) else {}


def _arm(cell: Mapping[str, Any]) -> str:
    """The cell's arm, `<arm>+pc-off` where it ran with prefix caching off (apart: acceptance
    and cold start differ with it)."""
    return variant(str(cell.get("arm")), cell.get("prefix_caching") is not False)


def _groups(cells: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], list[Mapping[str, Any]]]:
    out: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for c in cells:
        out.setdefault((_arm(c), int(c.get("concurrency") or 0)), []).append(c)
    return out


def _acceptance(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = []
    for (arm, conc), group in _groups(cells).items():
        per_pos = [c["per_position_acceptance"] for c in group if c.get("valid")
                   and isinstance(c.get("per_position_acceptance"), list)]
        if not per_pos:
            continue
        width = max(len(p) for p in per_pos)
        means = [fmean(p[i] for p in per_pos if len(p) > i) for i in range(width)]
        rates = [c["acceptance_check"]["rate"] for c in group
                 if isinstance(c.get("acceptance_check"), Mapping)
                 and isinstance(c["acceptance_check"].get("rate"), int | float)]
        sets = {str(_section(c, "request_set").get("name")) for c in group
                if _section(c, "request_set")}
        rows.append((text(arm), str(conc), " / ".join(f"{m:.3f}" for m in means),
                     _num(fmean(rates), 3) if rates else "-", text(", ".join(sorted(sets)))))
    if not rows:
        return []
    lines = ["Per-position acceptance (accepted at position i per draft, from vLLM's "
             "`vllm:spec_decode_num_accepted_tokens_per_pos`; mean over valid cells):", ""]
    lines += md_table(("arm", "concurrency", "position 0 / 1 / ...", "acceptance rate",
                       "request set"), rows)
    random = sorted({str(_section(c, "request_set").get("name")) for c in cells
                     if _section(c, "request_set").get("random_tokens") is True})
    if random:
        shown = text(", ".join(random))
        lines += ["", f"**Warning:** the request set is random token ids ({shown}): "
                  "position-0 acceptance is inflated and says little about real prompts; "
                  "use a chat-templated request file (bench.dataset.kind=jsonl or speed_bench)."]
    templated = sorted({f"{_section(c, 'request_set').get('name')} (SHA-256 "
                        f"{_section(c, 'request_set').get('sha256')})" for c in cells
                        if _section(c, "request_set").get("chat_templated") is True})
    if templated:
        lines += ["", f"Chat-templated by the load generator: {text(', '.join(templated))}."]
    return [*lines, ""]


def _flags(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = []
    for c in cells:
        check = _section(c, "acceptance_check")
        if check.get("flagged") is True:
            lines.append(f"- **Flagged** {text(c.get('cell_id'))}: {text(check.get('sentence'))}")
        stall = _section(c, "stall")
        if stall:
            lines.append(f"- **Stalled** {text(c.get('cell_id'))}: {text(stall.get('sentence'))}")
        for line in c.get("fallbacks") or ():
            lines.append(f"- Fallback in {text(c.get('cell_id'))}: {text(line)}")
    return [*lines, ""] if lines else []


def _cold_start(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = []
    arms: dict[str, list[Mapping[str, Any]]] = {}
    for c in cells:
        cold = _section(c, "cold_start")
        if cold:
            arms.setdefault(_arm(c), []).append(cold)
    for arm, colds in arms.items():
        def med(key: str, colds: list[Mapping[str, Any]] = colds) -> str:
            values = [v for cold in colds for v in [cold.get(key) if key.endswith("_s") else
                                                    _section(cold, "phases_s").get(key)]
                      if isinstance(v, int | float) and not isinstance(v, bool)]
            return _num(median(values)) if values else "-"
        rows.append((text(arm), str(len(colds)), *(med(k) for k, _ in PHASE_COLUMNS),
                     med("boot_s")))
    if not rows:
        return []
    return ["Cold start per arm (median seconds over its cells, from each server log's time "
            "stamps; vLLM 0.32 profiles adaptive verification inside graph capture):", "",
            *md_table(("arm", "cells", *(h for _, h in PHASE_COLUMNS), "boot to health"), rows),
            ""]


CACHE_PHASES = (("weights", "weights"), ("torch_compile", "torch.compile"),
                ("flashinfer_autotune", "FlashInfer autotune"), ("graph_capture", "graph capture"),
                ("adaptive_profile", "adaptive profile"))


def _boot_caches(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per arm: each boot phase's median seconds and its cache hits over the boots whose log
    said hit or miss, the caches' setting, and how many load-generator processes ran it."""
    arms: dict[str, list[Mapping[str, Any]]] = {}
    for c in cells:
        arms.setdefault(_arm(c), []).append(c)
    rows = []
    for arm, group in arms.items():
        boots = [_section(_section(c, "caches"), "boot") for c in group]
        if not any(boots) and not any(_section(_section(c, "caches"), "dirs") for c in group):
            continue
        cols = []
        for key, _ in CACHE_PHASES:
            phases = [_section(b, key) for b in boots]
            took = [t for p in phases if isinstance(t := p.get("took_s"), int | float)
                    and not isinstance(t, bool)]
            said = [p.get("cache") for p in phases if p.get("cache") in ("hit", "miss")]
            hits = f"{said.count('hit')}/{len(said)} hit" if said else ""
            cols.append(" ".join(x for x in (_num(median(took)) + " s" if took else "", hits)
                                 if x) or "-")
        dirs: dict[str, list[str]] = {}
        for c in group:
            for var, d in _section(_section(c, "caches"), "dirs").items():
                if isinstance(d, Mapping) and d.get("cache") in ("hit", "partial", "miss"):
                    dirs.setdefault(str(var), []).append(str(d.get("cache")))
        on_disk = ", ".join(
            f"{text(var)} {said.count('hit')}/{len(said)} hit"
            + (f" ({said.count('partial')} partial)" if "partial" in said else "")
            for var, said in sorted(dirs.items())) or "-"
        warm = {_section(c, "caches").get("warm") for c in group} - {None}
        pids = {_section(c, "load_generator").get("pid") for c in group} - {None}
        rows.append((text(arm), str(len(group)),
                     "warm" if warm == {True} else "cold" if warm == {False} else "-", *cols,
                     on_disk, str(len(pids)) if pids else "-"))
    if not rows:
        return []
    return ["Boot caches per arm (each phase's median seconds as vLLM reported them, and the "
            "boots whose log showed its cache hit; `bench.warm_caches`):", "",
            *md_table(("arm", "cells", "caches", *(h for _, h in CACHE_PHASES),
                       "cache directories (no new files: hit; some: partial)",
                       "load generators"), rows), ""]


def _gpus(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    rows, flags = [], []
    for c in cells:
        gpus = _section(c, "gpus")
        measured = [g for g in gpus.get("measured") or () if isinstance(g, Mapping)]
        if not measured:
            continue

        def mean(key: str, measured: list[Mapping[str, Any]] = measured) -> float | None:
            values = [v for g in measured if isinstance(v := _section(g, "means").get(key),
                                                          int | float)]
            return fmean(values) if values else None
        utils = [u for g in measured
                 if isinstance(u := _section(g, "means").get("utilization_pct"), int | float)]
        rows.append((text(c.get("cell_id")), text(gpus.get("tool")), str(len(measured)),
                     _num(mean("utilization_pct")), _num(min(utils)) if utils else "-",
                     _num(mean("power_w")), _num(mean("sm_clock_mhz"), 0),
                     _num(mean("memory_used_mib"), 0), _num(mean("temperature_c"))))
        flags += [f"- {text(c.get('cell_id'))}: {text(f)}" for f in gpus.get("flags") or ()]
    if not rows:
        return ["GPUs under load: not sampled (no vendor tool on the host, or "
                "watch.gpu_interval_s=0).", ""]
    return ["GPUs under load in the measured phase (means over its samples; per GPU in each "
            "cell's `gpus`):", "",
            *md_table(("cell", "tool", "GPUs", "utilisation %", "lowest GPU %", "power W",
                       "SM MHz", "memory MiB", "temperature C"), rows), "",
            *([*flags, ""] if flags else [])]


def watches(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """The section (nothing without cells)."""
    if not cells:
        return []
    return [WATCHES_TITLE, "", *_acceptance(cells), *_flags(cells), *_cold_start(cells),
            *_boot_caches(cells), *_gpus(cells)]


EXPECTED = {"adaptive": "some steps below K (adaptive verification)",
            "fixed_k": "K every step (fixed K)", "at_most_k": "up to K (none held)"}


@dataclass(frozen=True)
class EngagementRow:
    arm: str
    expected: str  # what the launch expects of the steps
    cells: int  # cells whose probe was judged (held to the expectation)
    held: int  # of those, cells where it held
    steps: str  # "12 of 340 steps below K=7 (4 cells)", or "-"
    outcome: str  # "shown in 3 of 3 cells", "NOT SHOWN in c8-r1, ...", "not measured: why"
    draft_params: str  # "97 (pinned 97) in 3 cells", "96, pinned 97 (MISMATCH) in ...", "-"


def _cells(n: int) -> str:
    return f"{n} cell" if n == 1 else f"{n} cells"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _steps(sections: Sequence[Mapping[str, Any]]) -> str:
    measured = [s for s in sections if _count(s.get("steps"))]
    if not measured:
        return "-"
    ks = {s.get("k") for s in measured}
    k = f"K={ks.pop()}" if len(ks) == 1 else "K"
    total = sum(_count(s.get("steps")) for s in measured)
    if all(isinstance(s.get("short_steps"), int) for s in measured):
        return (f"{sum(_count(s.get('short_steps')) for s in measured)} of {total} steps below "
                f"{k} ({_cells(len(measured))})")
    return (f"{sum(_count(s.get('trimmed_tokens')) for s in measured)} draft slots of {total} "
            f"steps x {k} left out ({_cells(len(measured))})")


def _params(cells: Sequence[Mapping[str, Any]]) -> str:
    seen = [(c.get("cell_id"), c["draft_params"]) for c in cells
            if isinstance(c.get("draft_params"), Mapping)]
    if not seen:
        return "-"
    bad = [f"{cid}: {_mismatch(p.get('params'), p.get('expected'))}" for cid, p in seen
           if not _is_count(p.get("params")) or not _is_count(p.get("expected"))
           or p["params"] != p["expected"]]
    if bad:
        return "MISMATCH: " + "; ".join(bad)
    first = seen[0][1]
    return f"{first.get('params')} (pinned {first.get('expected')}) in {_cells(len(seen))}"


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _mismatch(params: Any, pin: Any) -> str:
    """The sentence `draft_params.seen_params` writes, from the counts themselves."""
    if not _is_count(params):
        return "no parameter count recorded"
    hint = (" (one fewer: is the confidence head missing?)"
            if _is_count(pin) and params == pin - 1 else "")
    return f"DSpark draft loaded {params} params, pinned {pin if _is_count(pin) else 'none'}{hint}"


def judged(section: Mapping[str, Any]) -> Judgement:
    """The section's outcome recomputed from its counts (what the launch expects, the steps,
    the draft tokens, K); counts that cannot all hold are not measured."""
    counts: dict[str, Any] = {k: section.get(k) for k in (
        "requests", "reported", "steps", "draft_tokens", "accepted")}
    k, short = section.get("k"), section.get("short_steps")
    level = section.get("level")
    problems = [str(p) for p in section.get("problems") or ()]
    if not all(_is_count(v) for v in counts.values()) or (k is not None and not _is_count(k)) \
            or (short is not None and not _is_count(short)):
        problems.append("the recorded counts are not counts")
        counts = dict.fromkeys(counts, 0)
    elif k is not None and (counts["draft_tokens"] > counts["steps"] * k
                            or counts["accepted"] > counts["draft_tokens"]
                            or (short is not None and short > counts["steps"])
                            or (short is not None and (short > 0)
                                != (counts["steps"] * k > counts["draft_tokens"]))):
        problems.append(f"{counts['steps']} steps of K={k}, {counts['draft_tokens']} drafted, "
                        f"{counts['accepted']} accepted and {short} short steps cannot all hold")
    widths = section.get("widths")
    if widths is not None and not (isinstance(widths, list) and all(map(_is_count, widths))
                                   and sum(widths) == counts["steps"]):
        problems.append("the recorded verify widths are not counts of the steps")
        widths = None
    seen = Engagement(level if isinstance(level, str) else None, counts["requests"],
                      counts["reported"], counts["steps"], counts["draft_tokens"],
                      counts["accepted"], k, short, tuple(problems),
                      str(section.get("why") or ""), None if widths is None else tuple(widths))
    expected = section.get("expected")
    return judge(seen, expected if isinstance(expected, str) else None)


def _row(arm: str, cells: Sequence[Mapping[str, Any]]) -> EngagementRow | None:
    sections = [c["engagement"] for c in cells if isinstance(c.get("engagement"), Mapping)]
    params = _params(cells)
    if not sections and params == "-":
        return None
    expected = next((str(s.get("expected")) for s in sections if s.get("expected")), "")
    verdicts = [(c.get("cell_id"), judged(c["engagement"])) for c in cells
                if isinstance(c.get("engagement"), Mapping)]
    held = [(cid, v) for cid, v in verdicts if v.ok is not None]
    failed = [(str(cid), v) for cid, v in held if v.ok is False]
    if not held:
        why = next((v.sentence for _, v in verdicts if v.sentence), "no probe")
        unseen = any(v.outcome == FULL_K for _, v in verdicts)  # adaptive, no trim seen
        outcome = f"{'not shown' if unseen else 'not measured'}: {why}"
    elif failed:
        outcome = f"NOT SHOWN in {', '.join(c for c, _ in failed)}: {failed[0][1].sentence}"
    else:
        outcome = f"shown in {len(held)} of {_cells(len(sections))}"
    return EngagementRow(arm, EXPECTED.get(expected, expected or "-"), len(held),
                         len(held) - len(failed), _steps(sections), outcome, params)


def engagement_rows(cells: Sequence[Mapping[str, Any]]) -> tuple[EngagementRow, ...]:
    """One row per arm that speculates (or has a pinned draft), in the protocol's arm order."""
    protocol: Mapping[str, Any] = next(
        (c["protocol"] for c in cells if isinstance(c.get("protocol"), Mapping)), {})
    arms = list(dict.fromkeys([*(str(a) for a in protocol.get("arms") or ()),
                               *(str(c.get("arm")) for c in cells)]))
    rows = (_row(arm, [c for c in cells if str(c.get("arm")) == arm]) for arm in arms)
    return tuple(r for r in rows if r is not None)


ENGAGEMENT_TITLE = "### Adaptive verification seen to engage"


def engagement_section(rows: Sequence[EngagementRow]) -> list[str]:
    """The section (nothing when no arm speculates)."""
    if not rows:
        return []
    lines = [ENGAGEMENT_TITLE, "",
             "After its measured phase every cell of an arm that speculates sent as many "
             "requests at once as its concurrency to the launch `dspark serve` starts (nothing "
             "added); their verify steps, from the answers' per-request metrics where the server "
             "reports them, else from vLLM's /metrics spec-decode counters, are held to what the "
             "arm's launch expects, recomputed from the counts. A DSpark cell also read the "
             "draft's parameter count from its load line.", ""]
    lines += table(("arm", "expected steps", "held", "steps", "outcome", "draft params"),
                   [(text(r.arm), text(r.expected), f"{r.held} of {r.cells}", text(r.steps),
                     text(r.outcome), text(r.draft_params)) for r in rows])
    return [*lines, ""]


@dataclass(frozen=True)
class EvidenceRow:
    family: str
    expected: bool  # the profile requires the line
    line_no: int | None
    line: str | None


@dataclass(frozen=True)
class FaultScan:
    where: str  # "the smoke's server log (1,200 lines)", "63 bench cells' server logs"
    families: tuple[str, ...]  # the fatal-line families scanned for
    found: tuple[str, ...]  # what matched ("family: line", a bench cell's id first)


@dataclass(frozen=True)
class LogFindings:
    evidence: tuple[EvidenceRow, ...]
    evidence_note: str  # why there are no rows, else ""
    faults: tuple[FaultScan, ...]


def _check(smoke: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    return next((c for c in smoke.get("checks") or () if c.get("name") == name), None)


def _families(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The enabled `logs.fatal` families of a run's resolved config."""
    fatal = lookup(config, "logs", "fatal") or {}
    return tuple(str(k) for k, v in fatal.items() if v is not None)


def _evidence(smoke: SmokeRecords | None) -> tuple[tuple[EvidenceRow, ...], str]:
    if smoke is None:
        return (), "no smoke record"
    check = _check(smoke.smoke, "log_evidence")
    if check is None:
        return (), "the smoke record has no log_evidence check (written before dspark kept it)"
    families = lookup(check, "data", "evidence") or {}
    if not families:
        return (), str(check.get("evidence") or "no evidence families")
    return tuple(EvidenceRow(str(name), bool(f.get("expected")), f.get("line_no"),
                             None if f.get("line") is None else str(f["line"]))
                 for name, f in sorted(families.items())), ""


def _smoke_scan(smoke: SmokeRecords) -> FaultScan | None:
    check = _check(smoke.smoke, "no_fatal_lines")
    if check is None or check.get("status") not in ("passed", "failed"):
        return None
    data = check.get("data") or {}
    families = tuple(str(f) for f in data.get("families") or ()) or _families(smoke.config)
    lines = data.get("lines")
    where = "the smoke's server log" + (f" ({lines:,} lines)" if isinstance(lines, int) else "")
    found = tuple(f"{e.get('pattern')}: line {e.get('line_no')}: {e.get('line')}"
                  for e in data.get("events") or () if isinstance(e, Mapping))
    if check.get("status") == "failed" and not found:
        found = (str(check.get("evidence") or "a fatal line"),)
    return FaultScan(where, families, found)


def _bench_scan(bench: BenchRecords) -> FaultScan | None:
    if not bench.cells:
        return None
    configs = [bench.arm_configs[a] for a in sorted(bench.arm_configs)]
    families = next((f for f in map(_families, configs) if f), ())
    found = tuple(f"{c.get('cell_id')}: {line}" for c in bench.cells
                  if isinstance(c.get("fatal_lines"), list)
                  for line in c["fatal_lines"] if isinstance(line, str))
    n = len(bench.cells)
    return FaultScan(f"{n} bench cell{'s' if n != 1 else ''}' server logs", families, found)


def findings(smoke: SmokeRecords | None, bench: BenchRecords | None) -> LogFindings:
    evidence, note = _evidence(smoke)
    scans = [s for s in (_smoke_scan(smoke) if smoke else None,
                         _bench_scan(bench) if bench else None) if s is not None]
    return LogFindings(evidence, note, tuple(scans))


def _seen(line_no: int | None, line: str | None) -> str:
    return "not seen" if line_no is None else f"line {line_no}: {code(line or '')}"


def _scan(s: FaultScan, before: FaultScan | None) -> str:
    where, n = text(s.where), len(s.families)
    if not s.families:
        scanned = f"{where} scanned (the families are not recorded)"
    elif before is not None and before.families == s.families:
        scanned = f"{where} scanned for the same {n} families"
    else:
        scanned = f"{where} scanned for {n} fatal-line families ({text(', '.join(s.families))})"
    if not s.found:
        return f"- {scanned}: none matched."
    return f"- {scanned}: MATCHED {len(s.found)}: " + "; ".join(code(f) for f in s.found)


def log_findings_section(f: LogFindings | None) -> list[str]:
    if f is None:
        return []
    lines = ["Log evidence of the asked-for features (`logs.evidence`; expected where this "
             "profile requires the line):", ""]
    if f.evidence:
        lines += table(("line family", "expected by this profile", "seen in the server log"),
                       [(text(r.family), "yes" if r.expected else "no",
                         _seen(r.line_no, r.line)) for r in f.evidence])
    else:
        lines.append(f"None recorded: {text(f.evidence_note)}.")
    lines += ["", "Faults ruled out:", ""]
    if not f.faults:
        return [*lines, "- none: no server log was scanned (no smoke or bench record)."]
    return [*lines, *(_scan(s, f.faults[i - 1] if i else None) for i, s in enumerate(f.faults))]
