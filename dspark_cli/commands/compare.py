"""`dspark compare RUN_A RUN_B`: what changed between two bench or validate runs (config,
launch, runtime versions and pins, image, checkpoint hashes) and, per arm and concurrency in
both, B's throughput over A's with its interval and verdict. Exit 1 when any cell got slower
beyond the margin (a CI gate), 2 when the runs do not belong together.

    dspark compare runs/validate/<old> runs/validate/<new>
    dspark compare runs/bench/a runs/bench/b --json --out compare/
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dspark_cli.errors import ExitCode

EXAMPLES = (
    ("dspark compare runs/validate/<old> runs/validate/<new>",
     "what changed, which cells got slower"),
    ("dspark compare runs/bench/a runs/bench/b --json --out compare/", "as JSON, files there"),
    ("dspark compare runs/validate/<old> runs/validate/<new> || exit 1",
     "a CI gate: 1 when a cell got slower"),
)


def needs_machine(opts: argparse.Namespace) -> bool:
    """Reads records only: never detects hardware."""
    return False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_a", type=Path, metavar="RUN_A", help="the earlier run directory")
    parser.add_argument("run_b", type=Path, metavar="RUN_B", help="the run set against it")
    parser.add_argument("--out", metavar="DIR", type=Path,
                        help="where compare.json (and compare.png) go (default: RUN_B)")
    parser.add_argument("--json", action="store_true", help="print compare.json on stdout")


def run(cfg: None, opts: argparse.Namespace) -> int:
    """`cfg` is None: a comparison composes no config, it reads records."""
    from dspark_cli.compare.files import render, write
    from dspark_cli.compare.runs import compare_runs

    found = compare_runs(opts.run_a.expanduser(), opts.run_b.expanduser())
    out = (opts.out or opts.run_b).expanduser()
    paths = write(found, out)
    if opts.json:
        print(json.dumps(found.to_dict(), indent=2))
    else:
        sys.stdout.write(render(found))
    print(f"dspark: compare: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return int(ExitCode.OK if found.passed else ExitCode.CHECK_FAILED)
