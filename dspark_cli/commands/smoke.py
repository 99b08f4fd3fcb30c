"""`dspark smoke`: boot the planned server (or attach to one), check it live, give a verdict.

Managed (default): the same plan and preflight as `dspark serve`, the server in its own process
group, its output in the run directory's `server.log`, torn down on every path. Attached
(`server.url=URL`): no boot and no teardown; log checks only with `server.log=FILE`. On a
cluster engine (`deploy=slurm`): the deployment is submitted through it, checked from this host
at its head, and cancelled until the engine says it is gone. The exit code is the verdict's
(`smoke/checks.py`, codes from `errors.ExitCode`).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from dspark_cli.cli.command import Command
from dspark_cli.config.smoke import SmokePrimary
from dspark_cli.config.smoke import register as register_smoke_schema
from dspark_cli.console import output, print_json, progress
from dspark_cli.deploy.start import dry_launch
from dspark_cli.launch import checks
from dspark_cli.launch.record import run_dir
from dspark_cli.paths import SMOKE_JSON
from dspark_cli.smoke.result import render
from dspark_cli.smoke.workflow import smoke_in


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="print the launch the smoke would boot (what `serve --dry-run` "
                        "prints for the same config) and its preflight; start nothing")
    parser.add_argument("--json", action="store_true",
                        help="print the JSON report to stdout instead of the table")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="say why for each preflight rule not checked here")


def run(cfg: SmokePrimary, opts: argparse.Namespace) -> int:
    if opts.dry_run:
        return _dry_run(cfg, opts)
    directory = run_dir()
    doc = smoke_in(cfg, directory)
    if opts.json:
        print_json(doc.to_dict())
    else:
        output().print(render(doc))
    progress(f"report: {shlex.quote(str(directory / SMOKE_JSON))}")
    return int(doc.verdict.exit_code)


def _dry_run(cfg: SmokePrimary, opts: argparse.Namespace) -> int:
    """The launch a managed smoke boots, as its deploy target runs it, and the preflight that
    needs no machine; an attached smoke (`server.url`) boots nothing and says so."""
    if cfg.server.url is not None:
        print(f"# dspark smoke: attaches to {cfg.server.url}; boots nothing")
        return 0
    dry = dry_launch(cfg)
    if opts.json:
        print_json(dry.target.render_json(cfg, dry.plan, dry.findings))
    else:
        sys.stdout.write("# dspark smoke boots this launch, checks it live (/health, startup "
                         "lines, one request, spec-decode counters, fatal lines) and tears it "
                         "down\n" + dry.target.render(cfg, dry.plan))
    checks.print_findings(dry.findings)
    return checks.exit_code(dry.findings)


COMMAND = Command(
    name="smoke",
    examples=(
        ("dspark smoke +hw=mi350x", "boot the seed's deployment, check it live, tear it down"),
        ("dspark smoke +hw=mi350x speculative=dspark_fixed --json", "the fixed-K arm, as JSON"),
        ("dspark smoke server.url=http://127.0.0.1:8000 server.log=server.log",
         "attach to a running server"),
        ("dspark smoke", "no +hw: detected (no GPU: the tiny model, draft_model K=3)"),
    ),
    config="smoke",
    add_arguments=add_arguments,
    run=run,
    needs_machine=True,  # plans (or attaches to) a launch here: no +hw, it is detected
    store_schema=register_smoke_schema,  # the smoke primary: the launch schema plus `smoke`
)
