"""`dspark validate`: verify-checkpoint -> focused tests -> smoke -> bench -> accuracy -> the
report, from one composed config, into one run directory.

    dspark validate                         # CPU default: tiny model, smoke, bench=cpu
    dspark validate +hw=mi350x --dry-run    # the plan of every stage
    dspark validate validate.bench=null --keep-going
    dspark validate validate.accuracy.python=/opt/eval/bin/python   # lm_eval from elsewhere

Each stage calls the owning command's code; records go under the stage's folder of the run
directory (checkpoint/, tests/, smoke/, bench/, accuracy/), `validate.json` lists the stages,
and the report (report.md, report.json) is written last, also after a failure or Ctrl-C. Exit
code: the worst stage's (130 when interrupted).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from dspark_cli.cli.command import Command
from dspark_cli.config import validate as schema
from dspark_cli.launch.record import run_dir
from dspark_cli.validate.run import dry_run
from dspark_cli.validate.run import run as run_stages

if TYPE_CHECKING:
    from dspark_cli.config.validate import ValidatePrimary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan of every stage; start nothing")
    parser.add_argument("--commands", action="store_true",
                        help="with --dry-run: every bench cell's launch and load commands")
    parser.add_argument("--keep-going", action="store_true",
                        help="run the later stages after a failed one")
    parser.add_argument("--json", action="store_true",
                        help="report.json on stdout, not report.md (with --dry-run: the plan)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="say why for each preflight rule not checked here")


def _store_schema() -> None:
    """The validate primary: the launch schema plus every stage's settings."""
    schema.register()


def run(cfg: ValidatePrimary, opts: argparse.Namespace) -> int:
    if opts.dry_run:
        return dry_run(cfg, opts.json, opts.commands)
    return run_stages(cfg, run_dir(), opts.keep_going, opts.json)


COMMAND = Command(
    name="validate",
    examples=(
        ("dspark validate +hw=mi350x --dry-run", "every stage's plan on the seed's machine"),
        ("dspark validate +hw=mi350x", "checkpoint, tests, smoke, bench, accuracy, report"),
        ("dspark validate +hw=mi350x validate.bench=null", "without the bench stage"),
        ("dspark validate", "no +hw: detected (no GPU: tiny model, smoke, bench=cpu)"),
    ),
    config="validate",
    add_arguments=add_arguments,
    run=run,
    needs_machine=True,  # plans a launch on this machine: no +hw, the profile is detected
    store_schema=_store_schema,
)
