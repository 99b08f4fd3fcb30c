"""`dspark smoke`'s work, from a composed config to `smoke.json` in a run directory: plan,
start the server (or attach), check it live, record the verdict. Also `dspark validate`'s smoke
stage."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from dspark_cli.console import progress
from dspark_cli.errors import UsageError
from dspark_cli.launch import local_nodes
from dspark_cli.launch.layout import NodeLayout
from dspark_cli.launch.layout_rules import checked_layout
from dspark_cli.launch.plan import LaunchPlan, build_plan
from dspark_cli.launch.prepare import prepare
from dspark_cli.launch.provenance import collect
from dspark_cli.launch.vllm_verdict import plan_verdict
from dspark_cli.run_files import SERVER_LOG, SMOKE_JSON
from dspark_cli.server.process import ensure_port_free, stop_signals_as_interrupt
from dspark_cli.server.session import ServerSession
from dspark_cli.server.target import Target
from dspark_cli.smoke import result
from dspark_cli.smoke.background import BackgroundCheck
from dspark_cli.smoke.expectations import Expectations, expectations
from dspark_cli.smoke.result import SmokeResult
from dspark_cli.smoke.runner import run_smoke


def _profiles(cfg: DictConfig) -> dict[str, Any]:
    return {group: cfg[group].get("name") for group in
            ("hw", "model", "speculative", "compilation", "serving")}


def _validate(plan: LaunchPlan) -> tuple[bool, str]:
    """vLLM's own parser and engine config on the planned command (the same check as serve's)."""
    finding = plan_verdict(plan)
    return not finding.failed, finding.message


def _validated_nodes(layout: NodeLayout) -> tuple[bool, str]:
    """vLLM's verdict on every node's command, taken before the boot: beside several booting
    nodes, on a small machine, the validator can starve past its timeout. A rejection stops
    the smoke before anything starts (as `serve`)."""
    findings = local_nodes.vllm_accepts_nodes(layout)
    local_nodes.require_accepted(findings)
    return True, "; ".join(f.message for f in findings)


def _session(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout, exp: Expectations,
             directory: Path) -> tuple[ServerSession, BackgroundCheck | None, dict[str, Any]]:
    """The server session (managed or attached), vLLM's validation running beside the boot
    (managed, planned command only), and the provenance."""
    watch = dict(fatal=exp.fatal, watch=exp.watch, context_lines=exp.context_lines,
                 metrics_timeout_s=exp.metrics_timeout_s)
    if cfg.server.url:
        log = Path(cfg.server.log) if cfg.server.log else None
        if log is not None and not log.is_file():
            raise UsageError(f"server.log={log} is not a file; give the attached server's log, "
                             "or leave server.log unset to skip the log checks.")
        target = Target(plan.base_url, plan.client_host, plan.port, log,
                        float(cfg.server.ready_timeout_s), **watch)
        return ServerSession(target), None, collect(plan.model_path, None)
    if str(cfg.deploy.target) != "local":  # a cluster engine runs it: deploy/cluster_run.py
        from dspark_cli.deploy import cluster_run

        cluster_run.prepare(cfg, plan, layout, directory)
        target = cluster_run.cluster_target(cfg, plan, layout, directory, **watch)
        return ServerSession(target), None, collect(plan.model_path, None)
    local_nodes.refuse_custom_command(cfg, layout)
    ensure_port_free(plan.client_host, plan.port)  # before the run record is written
    prepared = prepare(cfg, plan, directory, ask_vllm=False)
    local_nodes.write_script(layout, directory)
    if layout.nodes > 1:
        verdict = _validated_nodes(layout)
        validation: BackgroundCheck | None = BackgroundCheck("vllm_accepts_command",
                                                             lambda: verdict)
    else:
        validation = None if prepared.custom_command else BackgroundCheck(
            "vllm_accepts_command", lambda: _validate(plan))

    def rejected() -> str | None:
        reason = validation.rejection() if validation is not None else None
        return f"vLLM rejected the command: {reason}" if reason else None

    target = local_nodes.node_target(prepared, plan, layout, cfg.server,
                                     directory / SERVER_LOG, **watch)
    return (ServerSession(target, abort=rejected), validation,
            collect(plan.model_path, prepared.machine))


def smoke_in(cfg: DictConfig, directory: Path) -> SmokeResult:
    """Run the smoke into `directory` (its run record and smoke.json): `dspark smoke`'s work,
    callable as a stage of `dspark validate`."""

    plan = build_plan(cfg)
    layout = checked_layout(cfg, plan)
    exp = replace(expectations(cfg), engines=layout.engines)
    session, validation, provenance = _session(cfg, plan, layout, exp, directory)
    progress(f"run directory {directory}")
    with stop_signals_as_interrupt():
        smoke = run_smoke(exp, session, plan.served_model_name, validation)
    doc = result.build(smoke, mode="managed" if session.managed else "attached",
                       base_url=session.base_url, log_path=session.target.log_path,
                       profiles=_profiles(cfg), provenance=provenance)
    doc.write(directory / SMOKE_JSON)
    return doc
