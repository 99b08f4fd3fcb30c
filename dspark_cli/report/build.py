"""The report of a set of run records (pure: `Sources` in, `Report` out). Every section says
where its facts came from; what no record holds is "unknown" or "not run", never left out.
Each section is a frozen record built and rendered by its own module; floats are rounded
before they get here, so the JSON and the Markdown are stable."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dspark_cli.report import (
    accuracy,
    bench_results,
    environment,
    log_findings,
    outcomes,
    revision,
)
from dspark_cli.report.accuracy import Accuracy
from dspark_cli.report.bench_results import Methodology, Results
from dspark_cli.report.engagement import EngagementRow, engagement_rows
from dspark_cli.report.environment import Environment, Provenance, Reproduction, Serving
from dspark_cli.report.log_findings import LogFindings
from dspark_cli.report.outcomes import Focused, Smoke, StageRow
from dspark_cli.report.revision import LintRow, SourceRevision
from dspark_cli.report.sources import Sources
from dspark_cli.report.watches import watches


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
    engagement: tuple[EngagementRow, ...] = ()  # per speculating arm (`engagement.py`)
    logs: LogFindings | None = None  # evidence lines, faults ruled out
    reproduction: Reproduction | None = None  # vLLM base and patch, the image caveat
    accuracy: Accuracy | None = None  # validate's accuracy stage (`accuracy.py`)
    # The watches' evidence from the bench cells, as Markdown lines (`watches.py`)
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
        revision=revision.revision(src.revision, src.tests is not None),
        lint=revision.lint(src.lint),
        engagement=engagement_rows(src.bench.cells) if src.bench else (),
        watches=tuple(watches(src.bench.cells)) if src.bench else (),
        logs=log_findings.findings(src.smoke, src.bench),
        reproduction=environment.reproduction_of(src),
        accuracy=accuracy.section(src.accuracy, None if src.accuracy_path is None
                                  else str(src.accuracy_path)),
    )
