"""The report as GitHub-flavoured Markdown, in the seed report's sections and order. Pure and
deterministic: the same `Report` gives the same bytes (no time of rendering, fixed float
formats, rows in the records' order).

Written beside the records as report.md and report.json, each replaced atomically (a reader
sees the old file or the new one, never half of one, and a link planted at their names is
replaced, not written through). What is written is redacted whatever the records held: every
string of the report goes through the secret filter before it is rendered."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from dspark_cli.errors import UsageError
from dspark_cli.launch.secrets import redact_text, redacted
from dspark_cli.report import sources
from dspark_cli.report.accuracy import accuracy_section
from dspark_cli.report.bench_results import methodology_section, results_section
from dspark_cli.report.build import Report, build
from dspark_cli.report.engagement import engagement_section
from dspark_cli.report.environment import (
    environment_section,
    provenance_section,
    serving_section,
)
from dspark_cli.report.log_findings import log_findings_section
from dspark_cli.report.markup import code, table, text
from dspark_cli.report.outcomes import focused_section, smoke_section
from dspark_cli.report.revision import revision_section
from dspark_cli.run_files import REPORT_JSON, REPORT_MD
from dspark_cli.untrusted import output_dir, printable, write_atomic

SECTIONS = ("Summary", "Source Revision", "Focused Validation", "Serving Smoke Validation",
            "Reproduction Environment", "Container Provenance", "Serving Configuration",
            "Throughput Methodology", "Results", "Accuracy")


def _summary(report: Report) -> list[str]:
    lines = ["## Summary", ""]
    if report.stages:
        rows = [(text(s.name), text(s.status), text(s.detail)) for s in report.stages]
        lines += [*table(("stage", "result", "detail"), rows), ""]
    sentence = report.results.sentence if report.results else (
        "No benchmark results: the bench stage was not run.")
    return [*lines, f"**Results:** {text(sentence)}"]


def render(report: Report) -> str:
    parts = [
        ["# Validation report", "", "Built by `dspark report` from the run records in:", "",
         *(f"- {code(s)}" for s in report.sources)],
        _summary(report), revision_section(report.revision),
        focused_section(report.focused, report.lint),
        [*smoke_section(report.smoke), "", *log_findings_section(report.logs)],
        environment_section(report.environment),
        provenance_section(report.provenance, report.reproduction),
        serving_section(report.serving), methodology_section(report.methodology),
        [*results_section(report.results), *engagement_section(report.engagement),
         *report.watches],
        accuracy_section(report.accuracy),
    ]
    return "\n\n".join("\n".join(p).rstrip("\n") for p in parts) + "\n"


def write_report(run_dirs: Sequence[Path], out_dir: Path) -> tuple[Report, str]:
    """Build the report of the records under `run_dirs` and write it into `out_dir`; returns
    the (redacted) report and its Markdown."""
    out = out_dir.resolve()
    if out.exists() and not out.is_dir():
        output_dir(out)  # refused before anything is read
    src = sources.collect(run_dirs)
    try:
        report = redacted(build(src, str(out)))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError,
            RecursionError) as e:
        # what the specs (`sources.py`) do not hold a record to: still a bad record
        raise UsageError(printable(redact_text(
            f"a record under {', '.join(map(str, src.directories))} is malformed "
            f"({type(e).__name__}: {e}); nothing was written.")),
            hint="restore the records from the run, or leave the run out") from None
    md = printable(redact_text(render(report)), newlines=True)
    output_dir(out)
    write_atomic(out / REPORT_MD, md)
    write_atomic(out / REPORT_JSON, json.dumps(report.to_dict(), indent=2, sort_keys=True)
                 + "\n")
    return report, md
