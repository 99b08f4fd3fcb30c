"""`dspark serve`: compose the launch, check it before anything boots, then print or run it
where `deploy.target` runs it (this host, a Slurm job, Kubernetes objects)."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING

from dspark_cli.cli.command import Command
from dspark_cli.console import print_json
from dspark_cli.deploy.start import TARGETS, deploy_target, dry_launch, dry_preflight, ready
from dspark_cli.errors import CheckFailed, UsageError
from dspark_cli.launch import checks
from dspark_cli.launch.record import run_dir
from dspark_cli.launch.rules import checked_plan
from dspark_cli.server.deployment import Watch
from dspark_cli.server.liveness import settings_of

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="print the environment and command, shell-ready; start nothing")
    parser.add_argument("--validate", action="store_true",
                        help="with --dry-run: also check the command with vLLM's own parser")
    parser.add_argument("--json", action="store_true", help="print a machine-readable plan")
    parser.add_argument("--apply", action="store_true",
                        help="deploy=k8s: kubectl apply the manifests and follow them; "
                        "Ctrl-C deletes them")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="say why for each preflight rule not checked here")


def _dry_run(cfg: LaunchConf, opts: argparse.Namespace) -> int:
    """Print what the target runs (the plan's script, every node's block, the job script, the
    manifests) and the preflight that needs no machine."""
    dry = dry_launch(cfg, opts.validate)
    if opts.json:
        print_json(dry.target.render_json(cfg, dry.plan, dry.findings))
    else:
        sys.stdout.write(dry.target.render(cfg, dry.plan))
    checks.print_findings(dry.findings)
    return checks.exit_code(dry.findings)


def run(cfg: LaunchConf, opts: argparse.Namespace) -> int:
    target = deploy_target(cfg)
    if opts.apply and target.hand_off is None:
        applied = " or ".join(f"deploy={n}" for n, t in TARGETS.items() if t.hand_off)
        raise UsageError(f"--apply is for {applied} (deploy={target.name} starts the "
                         f"deployment without it); drop --apply or use {applied}")
    if opts.dry_run:
        return _dry_run(cfg, opts)
    plan = checked_plan(cfg)  # a bad layout is refused for every target
    if target.hand_off is not None and not opts.apply:
        found = dry_preflight(cfg, plan, target, opts.validate)
        checks.print_findings(found)
        if any(f.failed for f in found):
            raise CheckFailed("preflight failed; nothing was written (details above).")
        return target.hand_off(cfg, plan, run_dir())
    # Lazy: the live server session (and its HTTP client) is what a dry run never loads.
    from dspark_cli.server.session import serve as serve_foreground

    directory = run_dir()
    started = ready(cfg, plan, directory, asked=opts.validate)
    print(f"dspark: run directory {shlex.quote(str(directory))}", file=sys.stderr)
    stall = (settings_of(cfg.watch.stall_s, cfg.watch.poll_s) if cfg.watch.serve
             else None)
    return serve_foreground(started.deployment(directory),
                            Watch(float(cfg.server.ready_timeout_s), stall=stall),
                            stall_exit=bool(cfg.watch.serve_exit))


COMMAND = Command(
    name="serve",
    examples=(
        ("dspark serve +hw=mi350x --dry-run", "the seed's deployment on 8 x MI350X, shell-ready"),
        ("dspark serve +hw=mi350x", "check it, record it and run it (on that host)"),
        ("dspark serve +hw=mi350x speculative=dspark_fixed", "the fixed-K arm"),
        ("dspark serve +hw=h200 --dry-run --validate", "vLLM's own parser checks it too"),
        ("dspark serve", "no +hw: detected (no GPU: a vLLM CPU demo server)"),
    ),
    config="serve",
    add_arguments=add_arguments,
    run=run,
    needs_machine=True,  # plans a launch on this machine: no +hw, the profile is detected
)
