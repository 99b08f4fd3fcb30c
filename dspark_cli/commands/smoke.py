"""`dspark smoke`: boot the planned server (or attach to one), check it live, give a verdict.

Managed (default): the same plan and preflight as `dspark serve`, the server in its own process
group, its output in the run directory's `server.log`, torn down on every path. Attached
(`server.url=URL`): no boot and no teardown; log checks only with `server.log=FILE`. On a
cluster engine (`deploy=slurm`): the deployment is submitted through it, checked from this host
at its head, and cancelled until the engine says it is gone. The exit code is the verdict's
(`smoke/verdict.py`, codes from `errors.ExitCode`).
"""

from __future__ import annotations

import argparse
import json
import shlex

from omegaconf import DictConfig

from dspark_cli.run_files import SMOKE_JSON

EXAMPLES = (
    ("dspark smoke +hw=mi350x", "boot the seed's deployment, check it live, tear it down"),
    ("dspark smoke +hw=mi350x speculative=dspark_fixed --json", "the fixed-K arm, as JSON"),
    ("dspark smoke server.url=http://127.0.0.1:8000 server.log=server.log",
     "attach to a running server"),
    ("dspark smoke", "no +hw: detected (no GPU: the tiny model, draft_model K=3)"),
)


def needs_machine(opts: argparse.Namespace) -> bool:
    """Plans (or attaches to) a launch on this machine: with no `+hw`, it is detected."""
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the JSON report to stdout instead of the table")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="say why for each preflight rule not checked here")


def register() -> None:
    from dspark_cli.smoke.schema import register as register_schema

    register_schema()


def run(cfg: DictConfig, opts: argparse.Namespace) -> int:
    from dspark_cli.console import progress
    from dspark_cli.launch.record import run_dir
    from dspark_cli.smoke.workflow import smoke_in

    directory = run_dir()
    doc = smoke_in(cfg, directory)
    if opts.json:
        print(json.dumps(doc.to_dict(), indent=2))
    else:
        from dspark_cli.console import output
        from dspark_cli.smoke.render import render

        output().print(render(doc))
    progress(f"report: {shlex.quote(str(directory / SMOKE_JSON))}")
    return int(doc.verdict.exit_code)
