"""The report as GitHub-flavoured Markdown, in the seed report's sections and order. Pure and
deterministic: the same `Report` gives the same bytes (no time of rendering, fixed float
formats, rows in the records' order)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

from dspark_cli.report.accuracy import accuracy_section
from dspark_cli.report.container import Reproduction
from dspark_cli.report.decisions import Decisions
from dspark_cli.report.engagement_md import engagement
from dspark_cli.report.evidence_md import log_findings, reproduction
from dspark_cli.report.markup import block, code, one_line, table, text
from dspark_cli.report.revision import LintRow
from dspark_cli.report.sections import (
    NOT_RUN,
    Environment,
    Focused,
    LosslessRow,
    Methodology,
    Provenance,
    Report,
    ResultRow,
    Results,
    Serving,
    Smoke,
)
from dspark_cli.report.source_md import lint_results, source_revision

SECTIONS = ("Summary", "Source Revision", "Focused Validation", "Serving Smoke Validation",
            "Reproduction Environment", "Container Provenance", "Serving Configuration",
            "Throughput Methodology", "Results", "Accuracy")


def _num(value: float | None, places: int = 2) -> str:
    return "-" if value is None else f"{value:,.{places}f}"


def _summary(report: Report) -> list[str]:
    lines = ["## Summary", ""]
    if report.stages:
        rows = [(text(s.name), text(s.status), text(s.detail)) for s in report.stages]
        lines += [*table(("stage", "result", "detail"), rows), ""]
    sentence = report.results.sentence if report.results else (
        "No benchmark results: the bench stage was not run.")
    return [*lines, f"**Results:** {text(sentence)}"]


def _focused(f: Focused, lint: tuple[LintRow, ...]) -> list[str]:
    lines = ["## Focused Validation", ""]
    if f.status == NOT_RUN:
        return [*lines, f"Not run: {text(f.detail)}."]
    lines += [f"Run in {code(f.source)}:", "", *block([one_line(t) for t in f.tests]), ""]
    counts = ", ".join(f"{n} {text(k)}" for k, n in f.counts.items()) or "no tests collected"
    lines.append(f"Result: **{text(f.status)}** ({counts}).")
    if f.detail:
        lines += ["", text(f.detail)]
    return [*lines, "", *lint_results(lint)]


def _smoke(s: Smoke | None) -> list[str]:
    lines = ["## Serving Smoke Validation", ""]
    if s is None:
        return [*lines, "Not run: no smoke record in the given run directories."]
    word = "passed" if s.passed else "FAILED"
    lines += [f"A live serving smoke test ({text(s.mode)}) {word}: {text(s.verdict)}.", ""]
    lines += table(("check", "result", "evidence"),
                   [(text(c.name), text(c.status), text(c.evidence)) for c in s.checks])
    lines += [""]
    if s.counters is None:
        lines.append("No speculative-decoding counters were recorded (speculative decoding "
                     "off, or /metrics unreadable).")
    else:
        c = s.counters
        width = len(str(max(c.drafts, c.draft_tokens, c.accepted)))
        lines += ["Observed speculative-decoding counters during the smoke request:", "",
                  *block([f"num_drafts_total:       {c.drafts:>{width}}",
                          f"num_draft_tokens_total: {c.draft_tokens:>{width}}  # "
                          f"{one_line(c.relation)}",
                          f"num_accepted_tokens:    {c.accepted:>{width}}"])]
    return [*lines, "", s.limits, "", f"Record: {code(s.record)}"]


def _environment(e: Environment) -> list[str]:
    return ["## Reproduction Environment", "", "### Hardware", "",
            f"- {text(e.hardware)}", f"- Tensor parallel size: {text(e.tensor_parallel_size)}",
            f"- Data parallel size: {text(e.data_parallel_size)}", "", "### Model", "",
            f"- Model: {text(e.model)}", f"- Local validation path: {text(e.model_path)}",
            f"- Architecture: {text(e.architecture)}",
            f"- Quantization: {text(e.quantization)}",
            f"- Checkpoint size: {text(e.checkpoint_size)}",
            f"- config.json SHA256: {text(e.config_sha256)}",
            f"- model.safetensors.index.json SHA256: {text(e.index_sha256)}", "", "### vLLM", "",
            f"- Option table the launch was checked with: {text(e.vllm_options)}", "",
            f"Record: {code(e.record)}"]


def _provenance(p: Provenance, r: Reproduction | None) -> list[str]:
    rows = (("Image tag", p.image_tag), ("Image ID", p.image_id),
            ("Base digest", p.base_digest), ("vLLM", p.vllm_version),
            ("vLLM base", p.vllm_commit), ("vLLM patch", p.vllm_patch),
            ("AITER", p.aiter_version),
            ("AITER commit", p.aiter_commit), ("AITER wheel SHA256", p.aiter_wheel_sha256),
            ("PyTorch", p.pytorch), ("ROCm (HIP)", p.rocm), ("CUDA", p.cuda))
    width = max(len(k) for k, _ in rows) + 1
    return ["## Container Provenance", "",
            *block([f"{k + ':':<{width}} {one_line(v)}" for k, v in rows]), "",
            "The image tag, ID and base digest come from `runtime.image.*` "
            "(DSPARK_IMAGE_TAG, DSPARK_IMAGE_ID, DSPARK_BASE_DIGEST): a container cannot see "
            "its own image.", "", *reproduction(r), "",
            f"Record: {code(p.record)}"]


def _serving(s: Serving | None) -> list[str]:
    lines = ["## Serving Configuration", ""]
    if s is None:
        return [*lines, "Not recorded: no run record with a launch (an attached smoke only)."]
    return [*lines, *block(s.script.splitlines(), "bash"), "", f"Record: {code(s.record)}"]


def _methodology(m: Methodology | None) -> list[str]:
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


def _results(r: Results | None) -> list[str]:
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
    return [*lines, *_lossless(r.lossless), *_decisions(r.decisions),
            f"Record: {code(r.record)}"]


def _decisions(d: Decisions | None) -> list[str]:
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


def render(report: Report) -> str:
    parts = [
        ["# Validation report", "", "Built by `dspark report` from the run records in:", "",
         *(f"- {code(s)}" for s in report.sources)],
        _summary(report), source_revision(report.revision),
        _focused(report.focused, report.lint),
        [*_smoke(report.smoke), "", *log_findings(report.logs)],
        _environment(report.environment), _provenance(report.provenance, report.reproduction),
        _serving(report.serving), _methodology(report.methodology),
        [*_results(report.results), *engagement(report.engagement), *report.watches],
        accuracy_section(report.accuracy),
    ]
    return "\n\n".join("\n".join(p).rstrip("\n") for p in parts) + "\n"
