"""`dspark serve`: compose the launch, check it before anything boots, then print or run it."""

from __future__ import annotations

import argparse
import json
import sys

from omegaconf import DictConfig

from dspark_cli.launch import checks
from dspark_cli.launch.layout import NodeLayout
from dspark_cli.launch.layout_render import layout_dict, layout_script
from dspark_cli.launch.layout_rules import checked_layout, layout_findings
from dspark_cli.launch.plan import LaunchPlan, build_plan
from dspark_cli.launch.render import plan_dict, shell_script
from dspark_cli.run_files import SERVER_LOG


def needs_machine(opts: argparse.Namespace) -> bool:
    """Plans a launch on this machine: with no `+hw`, the profile is detected."""
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="print the environment and command, shell-ready; start nothing")
    parser.add_argument("--validate", action="store_true",
                        help="with --dry-run: also check the command with vLLM's own parser")
    parser.add_argument("--json", action="store_true", help="print a machine-readable plan")
    parser.add_argument("--apply", action="store_true",
                        help="deploy=k8s: apply the manifests with kubectl and follow the "
                        "deployment until Ctrl-C, which deletes it (default: write them)")


def _dry_run(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout,
             opts: argparse.Namespace) -> int:
    """Print the plan (one node) or every node's block, and the preflight that needs no
    machine; --validate asks vLLM about every node's command."""
    several = layout.nodes > 1
    findings = checks.check(cfg, plan, machine=None, ask_vllm=opts.validate and not several)
    if several:
        findings += layout_findings(cfg, layout)
        if opts.validate:
            from dspark_cli.launch.vllm_verdict import layout_verdict

            findings += layout_verdict(layout)
    if opts.json:
        doc = {**plan_dict(plan), "preflight": [f.to_dict() for f in findings]}
        print(json.dumps({**doc, "layout": layout_dict(layout)} if several else doc, indent=2))
    else:
        sys.stdout.write(layout_script(layout) if several else shell_script(plan))
    checks.print_findings(findings)
    return checks.exit_code(findings)


def run(cfg: DictConfig, opts: argparse.Namespace) -> int:
    if opts.apply and str(cfg.deploy.target) != "k8s":
        from dspark_cli.errors import UsageError

        raise UsageError(f"--apply is for deploy=k8s (deploy={cfg.deploy.target} starts the "
                         "deployment without it); drop --apply or use deploy=k8s")
    plan = build_plan(cfg)
    layout = checked_layout(cfg, plan)  # a bad layout is refused for every target
    if str(cfg.deploy.target) != "local":  # a cluster engine runs it: Slurm, Kubernetes
        from dspark_cli.deploy.command import run as run_on_cluster

        return run_on_cluster(cfg, plan, opts)
    if opts.dry_run:
        return _dry_run(cfg, plan, layout, opts)
    from dspark_cli.launch import local_nodes
    from dspark_cli.launch.prepare import prepare
    from dspark_cli.launch.record import run_dir
    from dspark_cli.server import foreground
    from dspark_cli.server.process import ensure_port_free

    several = layout.nodes > 1
    local_nodes.refuse_custom_command(cfg, layout)
    ensure_port_free(plan.client_host, plan.port)  # before anything is written
    directory = run_dir()
    prepared = prepare(cfg, plan, directory, ask_vllm=not several)
    if several:
        local_nodes.require_accepted(local_nodes.vllm_accepts_nodes(layout))
        local_nodes.write_script(layout, directory)
    print(f"dspark: run directory {directory}", file=sys.stderr)
    return foreground.serve(local_nodes.node_target(prepared, plan, layout, cfg.server,
                                                    directory / SERVER_LOG))
