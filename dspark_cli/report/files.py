"""Writing the report next to the records: report.md and report.json, each replaced atomically
(a reader sees the old file or the new one, never half of one)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from dspark_cli.report import markdown, sources
from dspark_cli.report.build import build
from dspark_cli.report.sections import Report
from dspark_cli.run_files import REPORT_JSON, REPORT_MD


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def write_report(run_dirs: Sequence[Path], out_dir: Path) -> tuple[Report, str]:
    """Build the report of the records under `run_dirs` and write it into `out_dir`; returns
    the report and its Markdown."""
    out = out_dir.resolve()
    report = build(sources.collect(run_dirs), str(out))
    text = markdown.render(report)
    out.mkdir(parents=True, exist_ok=True)
    _write(out / REPORT_MD, text)
    _write(out / REPORT_JSON, json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    return report, text
