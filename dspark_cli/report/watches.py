"""The report's evidence from the watches of every bench cell (pure: type-checked cell records
in, Markdown lines out): per-position acceptance per arm and concurrency with the request set it
came from (a warning for random tokens), arms that accept (almost) nothing, the cold start per
arm in the phases its log shows, each cell's GPUs under load, and cells that stalled or fell
back (docs/bench.md, "Watches")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean, median
from typing import Any

from dspark_cli.bench.protocol import variant
from dspark_cli.report.markup import table as md_table
from dspark_cli.report.markup import text

TITLE = "### Watches"
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
    return [TITLE, "", *_acceptance(cells), *_flags(cells), *_cold_start(cells), *_gpus(cells)]
