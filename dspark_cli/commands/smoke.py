"""`dspark smoke`: boot the planned server (or attach to one), check it live, give a verdict.

Managed (default): the same plan and preflight as `dspark serve`, the server in its own process
group, its output in the run directory's `server.log`, torn down on every path. Attached
(`server.url=URL`): no boot and no teardown; log checks only with `server.log=FILE`.
Exit codes: 0 pass, 1 a check failed, 2 usage/config error, 3 the server failed to start or
stay healthy, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig


def needs_machine(opts: argparse.Namespace) -> bool:
    """Plans (or attaches to) a launch on this machine: with no `+hw`, it is detected."""
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the JSON report to stdout instead of the table")


def register() -> None:
    from dspark_cli.smoke.schema import register as register_schema

    register_schema()


def _profiles(cfg: DictConfig) -> dict[str, Any]:
    return {group: cfg[group].get("name") for group in
            ("hw", "model", "speculative", "compilation", "serving")}


def _validate(plan: Any) -> tuple[bool, str]:
    """vLLM's own parser and engine config on the planned command (the same check as serve's)."""
    from dspark_cli.launch.prepare import validate_with_vllm

    finding = validate_with_vllm(plan)
    return not finding.failed, finding.message


def run(cfg: DictConfig, opts: argparse.Namespace) -> int:
    from dspark_cli.errors import ServerError, UsageError
    from dspark_cli.launch import prepare as launch
    from dspark_cli.launch.plan import build_plan
    from dspark_cli.launch.provenance import collect
    from dspark_cli.launch.record import run_dir
    from dspark_cli.server.process import port_in_use, sigterm_as_interrupt
    from dspark_cli.smoke import report
    from dspark_cli.smoke.expectations import expectations
    from dspark_cli.smoke.runner import BackgroundCheck, Target, progress, run_smoke

    exp = expectations(cfg)
    plan = build_plan(cfg)
    directory = run_dir()
    ready_timeout_s = float(cfg.server.ready_timeout_s)
    if cfg.server.url:
        log = Path(cfg.server.log) if cfg.server.log else None
        if log is not None and not log.is_file():
            raise UsageError(f"server.log={log} is not a file; give the attached server's log, "
                             "or leave server.log unset to skip the log checks.")
        target = Target(plan.base_url, plan.served_model_name, log, ready_timeout_s)
        provenance = collect(plan.model_path, None)
        mode = "attached"
    else:
        prepared = launch.prepare(cfg, plan, directory, validate=False)
        server = launch.server_for(plan, prepared)
        if port_in_use(server.host, server.port):
            raise ServerError(f"port {server.port} on {server.host} is already in use; choose "
                              "another with server.port=<port>, or attach with "
                              f"server.url=http://{server.host}:{server.port}.")
        validation = None if cfg.server.command is not None else BackgroundCheck(
            "vllm_accepts_command", lambda: _validate(plan))
        target = Target(plan.base_url, plan.served_model_name, server.log_path, ready_timeout_s,
                        float(cfg.server.stop_grace_s), server, validation)
        provenance = collect(plan.model_path, prepared.machine)
        mode = "managed"
    progress(f"run directory {directory}")
    with sigterm_as_interrupt():
        smoke = run_smoke(exp, target)
    doc = report.build(smoke, mode=mode, base_url=plan.base_url, log_path=target.log_path,
                       profiles=_profiles(cfg), provenance=provenance)
    report.write(doc, directory / "smoke.json")
    if opts.json:
        print(json.dumps(doc, indent=2))
    else:
        from rich.console import Console

        Console().print(report.render(doc))
    progress(f"report: {directory / 'smoke.json'}")
    return int(smoke.verdict.exit_code)
