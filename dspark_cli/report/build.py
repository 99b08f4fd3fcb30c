"""The report of a set of run records (pure: `Sources` in, `Report` out). Every section says
where its facts came from; what no record holds is "unknown" or "not run", never left out."""

from __future__ import annotations

from dspark_cli.report import (
    accuracy,
    bench_results,
    environment,
    log_findings,
    outcomes,
    revision,
)
from dspark_cli.report.engagement import engagement_rows
from dspark_cli.report.sections import Report
from dspark_cli.report.sources import Sources
from dspark_cli.report.watches_md import watches


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
