"""Writing the report next to the records: report.md and report.json, each replaced atomically
(a reader sees the old file or the new one, never half of one, and a link planted at their
names is replaced, not written through). What is written is redacted whatever the records
held: every string of the report goes through the secret filter before it is rendered."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from dspark_cli.errors import UsageError
from dspark_cli.launch.secrets import redact_text, redacted
from dspark_cli.report import markdown, sources
from dspark_cli.report.build import build
from dspark_cli.report.sections import Report
from dspark_cli.run_files import REPORT_JSON, REPORT_MD
from dspark_cli.untrusted import output_dir, printable, write_atomic


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
        # what the specs (`record_specs.py`) do not hold a record to: still a bad record
        raise UsageError(printable(redact_text(
            f"a record under {', '.join(map(str, src.directories))} is malformed "
            f"({type(e).__name__}: {e}); nothing was written.")),
            hint="restore the records from the run, or leave the run out") from None
    text = printable(redact_text(markdown.render(report)), newlines=True)
    output_dir(out)
    write_atomic(out / REPORT_MD, text)
    write_atomic(out / REPORT_JSON, json.dumps(report.to_dict(), indent=2, sort_keys=True)
                 + "\n")
    return report, text
