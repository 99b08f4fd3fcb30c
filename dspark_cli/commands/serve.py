"""`dspark serve`: compose the launch, check it before anything boots, then print or run it."""

from __future__ import annotations

import argparse
import json
import sys

from omegaconf import DictConfig

from dspark_cli.launch import checks
from dspark_cli.launch.plan import build_plan
from dspark_cli.launch.render import plan_dict, shell_script


def needs_machine(opts: argparse.Namespace) -> bool:
    """Plans a launch on this machine: with no `+hw`, the profile is detected."""
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="print the environment and command, shell-ready; start nothing")
    parser.add_argument("--validate", action="store_true",
                        help="with --dry-run: also check the command with vLLM's own parser")
    parser.add_argument("--json", action="store_true", help="print a machine-readable plan")


def run(cfg: DictConfig, opts: argparse.Namespace) -> int:
    plan = build_plan(cfg)
    if str(cfg.deploy.target) != "local":  # a cluster engine runs it: Slurm, Kubernetes
        from dspark_cli.deploy.command import run as run_on_cluster

        return run_on_cluster(cfg, plan, opts)
    if opts.dry_run:
        findings = checks.check(cfg, plan, machine=None, validate=opts.validate)
        if opts.json:
            print(json.dumps({**plan_dict(plan), "preflight": [f.to_dict() for f in findings]},
                             indent=2))
        else:
            sys.stdout.write(shell_script(plan))
        checks.report(findings)
        return checks.exit_code(findings)
    from dspark_cli.launch.prepare import prepare
    from dspark_cli.launch.record import run_dir
    from dspark_cli.server import foreground
    from dspark_cli.server.process import ensure_port_free

    ensure_port_free(plan.client_host, plan.port)  # before anything is written
    directory = run_dir()
    prepared = prepare(cfg, plan, directory)
    print(f"dspark: run directory {directory}", file=sys.stderr)
    return foreground.serve(prepared.target(plan, cfg.server, directory / "server.log"))
