"""`dspark report RUN_DIR...`: the validation report (report.md, report.json) from run
directories that exist (a `dspark validate` run, or separate `smoke` and `bench` runs). It runs
nothing and measures nothing; the same records give a byte-identical report.

    dspark report runs/validate/20250101-000000
    dspark report runs/smoke/20250101-000000 runs/bench/20250101-001000 --out report/
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from dspark_cli.cli.command import Command
from dspark_cli.console import print_json
from dspark_cli.errors import UsageError
from dspark_cli.paths import REPORT_MD
from dspark_cli.report.markdown import write_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", nargs="*", type=Path, metavar="RUN_DIR",
                        help="run directories of `dspark validate`, `smoke` or `bench`")
    parser.add_argument("--out", metavar="DIR", type=Path,
                        help="where report.md and report.json go (default: the first RUN_DIR)")
    parser.add_argument("--json", action="store_true",
                        help="print report.json instead of report.md on stdout")


def run(cfg: None, opts: argparse.Namespace) -> int:
    """`cfg` is None: the command composes no config."""
    if not opts.run_dirs:
        raise UsageError("give at least one run directory.",
                         hint="dspark report runs/validate/<time>  (or a smoke and a bench run)")
    out = (opts.out or opts.run_dirs[0]).expanduser()
    report, text = write_report([d.expanduser() for d in opts.run_dirs], out)
    if opts.json:
        print_json(report.to_dict(), sort_keys=True)
    else:
        sys.stdout.write(text)
    print(f"dspark: report: {shlex.quote(str(out.resolve() / REPORT_MD))}", file=sys.stderr)
    return 0


COMMAND = Command(
    name="report",
    examples=(
        ("dspark report runs/validate/<time>", "report.md and report.json of a validate run"),
        ("dspark report runs/smoke/<time> runs/bench/<time> --out report/", "from separate runs"),
        ("dspark report runs/validate/<time> --json", "report.json on stdout"),
    ),
    add_arguments=add_arguments,
    run=run,
)
