"""`dspark smoke`'s work, from a composed config to `smoke.json` in a run directory: plan,
start the server through the one start step (or attach to a running one), check it live,
record the verdict. Also `dspark validate`'s smoke stage."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.config.choices import DraftTokensRule
from dspark_cli.console import progress
from dspark_cli.deploy.start import attach, ready
from dspark_cli.launch.effective import EffectiveLaunch
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.record import collect
from dspark_cli.launch.rules import checked_plan
from dspark_cli.paths import SMOKE_JSON
from dspark_cli.server.deployment import Watch
from dspark_cli.server.liveness import settings_of
from dspark_cli.server.metrics import expected_of
from dspark_cli.server.process import stop_signals_as_interrupt
from dspark_cli.smoke import result
from dspark_cli.smoke.expectations import Expectations, StepsExpect, expectations
from dspark_cli.smoke.result import SmokeResult
from dspark_cli.smoke.runner import BackgroundCheck, run_smoke
from dspark_cli.vllm.accepts import Verdicts

if TYPE_CHECKING:
    from dspark_cli.config.smoke import SmokePrimary
    from dspark_cli.server.session import ServerSession

CHECK = "vllm_accepts_command"


def _profiles(cfg: SmokePrimary) -> dict[str, Any]:
    return {group: getattr(cfg, group).name for group in
            ("hw", "model", "speculative", "compilation", "serving")}


def _session(cfg: SmokePrimary, plan: LaunchPlan, exp: Expectations, directory: Path,
             verdicts: Verdicts | None) -> tuple[ServerSession, BackgroundCheck | None,
                                                 dict[str, Any]]:
    """The server session (attached, or started where `deploy.target` runs it), vLLM's
    verdict as a check (taken beside the boot for one node here, before it for several), and
    the provenance."""
    from dspark_cli.server.session import ServerSession  # the live session: a dry run plans

    watch = Watch(float(cfg.server.ready_timeout_s), exp.fatal, exp.watch, exp.context_lines,
                  exp.metrics_timeout_s, float(cfg.server.attach_refused_s),
                  float(cfg.server.metrics_settle_s),
                  stall=settings_of(cfg.watch.stall_s, cfg.watch.poll_s))
    if cfg.server.url:
        return ServerSession(attach(cfg, plan), watch), None, collect(plan.model_path, None)
    start = ready(cfg, plan, directory, beside=True, verdicts=verdicts)
    validation: BackgroundCheck | None = None
    if start.beside is not None:
        beside = start.beside

        def verdict() -> tuple[bool, str]:
            finding = beside()
            return not finding.failed, finding.message

        validation = BackgroundCheck(CHECK, verdict)
    elif start.verdict:
        taken = (True, "; ".join(f.message for f in start.verdict))
        validation = BackgroundCheck(CHECK, lambda: taken)

    def rejected() -> str | None:
        reason = validation.rejection() if validation is not None else None
        return f"vLLM rejected the command: {reason}" if reason else None

    session = ServerSession(start.deployment(directory), watch, abort=rejected)
    return session, validation, collect(plan.model_path, start.machine)


def smoke_in(cfg: SmokePrimary, directory: Path,
             verdicts: Verdicts | None = None) -> SmokeResult:
    """Run the smoke into `directory` (its run record and smoke.json): `dspark smoke`'s work,
    callable as a stage of `dspark validate` (`verdicts`: vLLM's answers that stage shares).
    It boots `dspark serve`'s checked plan of the same config, nothing added (one launch; the
    engagement evidence is read from what that launch reports)."""
    plan = checked_plan(cfg)
    exp = replace(expectations(cfg), engines=plan.layout.engines,
                  steps=StepsExpect(expected_of(
                      plan.arg("speculative_config"),
                      cfg.speculative.draft_tokens_rule == DraftTokensRule.exact)))
    exp = replace(exp, adaptive=EffectiveLaunch.of(plan).adaptive)
    session, validation, provenance = _session(cfg, plan, exp, directory, verdicts)
    progress(f"run directory {shlex.quote(str(directory))}")
    with stop_signals_as_interrupt():
        smoke = run_smoke(exp, session, plan.served_model_name, validation)
    doc = result.build(smoke, mode="managed" if session.managed else "attached",
                       base_url=session.base_url, log_path=session.log_path,
                       profiles=_profiles(cfg), provenance=provenance)
    doc.write(directory / SMOKE_JSON)
    return doc
