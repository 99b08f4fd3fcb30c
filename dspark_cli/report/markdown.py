"""The report of a set of run records (pure: `Sources` in, `Report` out, `build`). Every section
says where its facts came from; what no record holds is "unknown" or "not run", never left out.
Each section is a frozen record built and rendered by its own module; floats are rounded before
they get here, so the JSON and the Markdown are stable.

The report as GitHub-flavoured Markdown, in the seed report's sections and order. Pure and
deterministic: the same `Report` gives the same bytes (no time of rendering, fixed float
formats, rows in the records' order).

Written beside the records as report.md and report.json, each replaced atomically (a reader
sees the old file or the new one, never half of one, and a link planted at their names is
replaced, not written through). What is written is redacted whatever the records held: every
string of the report goes through the secret filter before it is rendered."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dspark_cli.console import json_text
from dspark_cli.errors import UsageError
from dspark_cli.launch.secrets import redact_text, redacted
from dspark_cli.paths import REPORT_JSON, REPORT_MD
from dspark_cli.report import (
    accuracy,
    bench_results,
    environment,
    evidence,
    outcomes,
    sources,
)
from dspark_cli.report.accuracy import Accuracy, accuracy_section
from dspark_cli.report.bench_results import (
    Methodology,
    Results,
    methodology_section,
    results_section,
)
from dspark_cli.report.environment import (
    Environment,
    Provenance,
    Reproduction,
    Serving,
    environment_section,
    provenance_section,
    serving_section,
)
from dspark_cli.report.evidence import (
    EngagementRow,
    LogFindings,
    engagement_rows,
    engagement_section,
    log_findings_section,
    watches,
)
from dspark_cli.report.markup import code, table, text
from dspark_cli.report.outcomes import (
    Focused,
    LintRow,
    Smoke,
    SourceRevision,
    StageRow,
    focused_section,
    revision_section,
    smoke_section,
)
from dspark_cli.report.sources import Sources
from dspark_cli.untrusted import output_dir, printable, write_atomic


@dataclass(frozen=True)
class Report:
    sources: tuple[str, ...]
    stages: tuple[StageRow, ...]
    focused: Focused
    smoke: Smoke | None
    environment: Environment
    provenance: Provenance
    serving: Serving | None
    methodology: Methodology | None
    results: Results | None
    revision: SourceRevision | None = None  # the focused stage's source tree (git)
    lint: tuple[LintRow, ...] = ()  # the focused stage's lint/format commands
    engagement: tuple[EngagementRow, ...] = ()  # per speculating arm (`evidence.py`)
    logs: LogFindings | None = None  # evidence lines, faults ruled out
    reproduction: Reproduction | None = None  # vLLM base and patch, the image caveat
    accuracy: Accuracy | None = None  # validate's accuracy stage (`accuracy.py`)
    # The watches' evidence from the bench cells, as Markdown lines (`evidence.py`)
    watches: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build(src: Sources, out_dir: str | None = None) -> Report:
    """The report of the given records; `out_dir` (where report.md goes) makes the plot's
    link relative."""
    env, prov, serving = environment.launch_sections(src)
    return Report(
        sources=tuple(str(d) for d in src.directories),
        stages=outcomes.stages(src),
        focused=outcomes.focused(src.tests),
        smoke=outcomes.smoke(src.smoke),
        environment=env,
        provenance=prov,
        serving=serving,
        methodology=bench_results.methodology(src.bench),
        results=bench_results.results(src.bench, out_dir),
        revision=outcomes.revision(src.revision, src.tests is not None),
        lint=outcomes.lint(src.lint),
        engagement=engagement_rows(src.bench.cells) if src.bench else (),
        watches=tuple(watches(src.bench.cells)) if src.bench else (),
        logs=evidence.findings(src.smoke, src.bench),
        reproduction=environment.reproduction_of(src),
        accuracy=accuracy.section(src.accuracy, None if src.accuracy_path is None
                                  else str(src.accuracy_path)),
    )


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
    write_atomic(out / REPORT_JSON, json_text(report.to_dict(), sort_keys=True))
    return report, md
