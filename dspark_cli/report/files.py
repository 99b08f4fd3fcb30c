"""Writing the report next to the records: report.md and report.json, each replaced atomically
(a reader sees the old file or the new one, never half of one, and a link planted at their
names is replaced, not written through). What is written is redacted whatever the records
held: every string of the report goes through the secret filter before it is rendered."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dspark_cli.errors import UsageError
from dspark_cli.launch.secrets import redact_text
from dspark_cli.report import markdown, sources
from dspark_cli.report.build import build
from dspark_cli.report.sections import Report
from dspark_cli.run_files import REPORT_JSON, REPORT_MD
from dspark_cli.untrusted import write_atomic


def redacted(value: Any) -> Any:
    """`value` (the report, a section, any field) with every string through the filter."""
    if isinstance(value, str):
        return redact_text(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: redacted(getattr(value, f.name))
                                             for f in dataclasses.fields(value)})
    if isinstance(value, tuple | list):
        return type(value)(redacted(v) for v in value)
    if isinstance(value, dict):
        return {redacted(k): redacted(v) for k, v in value.items()}
    return value


def write_report(run_dirs: Sequence[Path], out_dir: Path) -> tuple[Report, str]:
    """Build the report of the records under `run_dirs` and write it into `out_dir`; returns
    the (redacted) report and its Markdown."""
    out = out_dir.resolve()
    src = sources.collect(run_dirs)
    try:
        report = redacted(build(src, str(out)))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        # what the specs (`record_specs.py`) do not hold a record to: still a bad record
        raise UsageError(redact_text(
            f"a record under {', '.join(map(str, src.directories))} is malformed "
            f"({type(e).__name__}: {e}); nothing was written."),
            hint="restore the records from the run, or leave the run out") from None
    text = redact_text(markdown.render(report))
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / REPORT_MD, text)
    write_atomic(out / REPORT_JSON, json.dumps(report.to_dict(), indent=2, sort_keys=True)
                 + "\n")
    return report, text
