"""`dspark compare RUN_A RUN_B`: what changed between two bench or validate runs (protocol,
config, launch, runtime versions and pins, image, checkpoint hashes) and, per arm and
concurrency, B's throughput over A's with its interval and verdict. Exit 1 when the gate fails
(a cell slower beyond the caller's margin, a cell A measured that B did not, nothing compared),
2 when the runs do not belong together or an argument is wrong. An arm whose median cold start
grew beyond `--boot-margin` is flagged, never gated.

    dspark compare runs/validate/<old> runs/validate/<new>
    dspark compare runs/bench/a runs/bench/b --json --out compare/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dspark_cli.cli.command import Command
from dspark_cli.compare import (
    DEFAULT_BOOT_MARGIN,
    DEFAULT_MARGIN,
    check_boot_margin,
    check_margin,
    compare_runs,
    render,
    write,
)
from dspark_cli.console import print_json
from dspark_cli.errors import ExitCode
from dspark_cli.launch.secrets import redacted
from dspark_cli.untrusted import output_dir, shown_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_a", type=Path, metavar="RUN_A", help="the earlier run directory")
    parser.add_argument("run_b", type=Path, metavar="RUN_B", help="the run set against it")
    parser.add_argument("--out", metavar="DIR", type=Path,
                        help="where compare.json (and compare.png) go (default: RUN_B)")
    parser.add_argument("--json", action="store_true", help="print compare.json on stdout")
    parser.add_argument("--margin", type=float, default=None, metavar="FRACTION",
                        help="the equivalence margin the gate judges by, in [0, 1) "
                        "(default 0.05); never taken from the runs' records")
    parser.add_argument("--boot-margin", type=float, default=None, metavar="FRACTION",
                        help="how much an arm's median cold start may grow before it is "
                        "flagged, in [0, 10] (default 0.25); a flag, never a gate failure")


def run(cfg: None, opts: argparse.Namespace) -> int:
    """`cfg` is None: the command composes no config."""
    margin = check_margin(DEFAULT_MARGIN if opts.margin is None else opts.margin)
    boot_margin = check_boot_margin(DEFAULT_BOOT_MARGIN if opts.boot_margin is None
                                    else opts.boot_margin)
    out = (opts.out or opts.run_b).expanduser()
    if out.exists() and not out.is_dir():
        output_dir(out)  # refused before anything is read
    found = compare_runs(opts.run_a.expanduser(), opts.run_b.expanduser(), margin,
                         boot_margin)
    paths = write(found, out)
    if opts.json:
        print_json(redacted(found.to_dict()))
    else:
        sys.stdout.write(render(found))
    print(f"dspark: compare: {', '.join(shown_path(p) for p in paths)}", file=sys.stderr)
    return int(ExitCode.OK if found.passed else ExitCode.CHECK_FAILED)


COMMAND = Command(
    name="compare",
    examples=(
        ("dspark compare runs/validate/<old> runs/validate/<new>",
         "what changed, which cells got slower"),
        ("dspark compare runs/bench/a runs/bench/b --json --out compare/", "as JSON, files there"),
        ("dspark compare runs/validate/<old> runs/validate/<new> || exit 1",
         "a CI gate: 1 when a cell got slower"),
    ),
    add_arguments=add_arguments,
    run=run,
)
