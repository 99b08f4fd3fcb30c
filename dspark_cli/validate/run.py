"""`dspark validate`'s two sequences from a composed config: the dry run (every stage's plan,
printed) and the run (the stages in order into one run directory, then the report, also after a
failure or Ctrl-C). The stages themselves are `stages.py`'s calls into the owning libraries."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.accuracy.run import Scorer, prepare
from dspark_cli.accuracy.run import input_findings as accuracy_findings
from dspark_cli.bench.arms import compose_arms
from dspark_cli.bench.dataset import checked_inputs, input_findings
from dspark_cli.bench.dry_run import estimate_of
from dspark_cli.bench.dry_run import plan_dict as bench_dict
from dspark_cli.bench.dry_run import plan_text as bench_text
from dspark_cli.bench.workflow import protocol_of
from dspark_cli.console import json_text, print_json, progress
from dspark_cli.deploy.start import deploy_target, dry_launch, dry_preflight
from dspark_cli.errors import DsparkError, ExitCode, worst
from dspark_cli.launch import checks
from dspark_cli.launch.record import write_config
from dspark_cli.launch.secrets import redact_text
from dspark_cli.paths import REPORT_MD, VALIDATE_JSON
from dspark_cli.report.markdown import write_report
from dspark_cli.server.process import stop_signals_as_interrupt
from dspark_cli.status import Finding, Status
from dspark_cli.untrusted import write_atomic
from dspark_cli.validate import stages
from dspark_cli.validate.stages import StageResult, plan_doc, plan_text
from dspark_cli.vllm.accepts import Verdicts

if TYPE_CHECKING:
    from dspark_cli.accuracy.run import Scorer
    from dspark_cli.config.validate import ValidatePrimary


def dry_run(cfg: ValidatePrimary, as_json: bool, commands: bool) -> int:
    """Every stage's plan as the run would start it: the smoke's launch where `deploy.target`
    runs it (its node layout checked, the target's own checks), the bench's every arm; the
    worst finding's exit code."""
    directory = Path.cwd() / "runs" / "validate" / "<time>"
    launch = dry_launch(cfg)  # a broken node layout is refused as the smoke would refuse it
    findings: list[Finding] = list(launch.findings)
    bench: Any = None
    if cfg.validate.bench is not None:
        protocol, dataset = protocol_of(cfg)
        findings += input_findings(protocol, dataset)
        findings += accuracy_findings(cfg)
        arms = compose_arms(cfg, protocol)
        found = {name: dry_preflight(arm.cfg, arm.plan, deploy_target(arm.cfg))
                 for name, arm in arms.items()}
        for name, arm_found in found.items():
            failed = [f for f in arm_found if f.failed]
            checks.print_findings(failed, label=name)
            findings += failed
        estimate = estimate_of(cfg, Path.cwd())
        bench = (bench_dict(protocol, dataset, arms, directory / "bench", found, estimate)
                 if as_json else bench_text(protocol, dataset, arms, directory / "bench",
                                            estimate, commands=commands))
    if as_json:
        rendered = launch.target.render_json(cfg, launch.plan, tuple(findings))
        print_json(plan_doc(cfg, directory, rendered, bench))
    else:
        sys.stdout.write(plan_text(cfg, directory, launch.target.render(cfg, launch.plan),
                                   bench))
    checks.print_findings(findings)
    return checks.exit_code(findings)


def run(cfg: ValidatePrimary, directory: Path, keep_going: bool, as_json: bool) -> int:
    """Every stage into `directory`, validate.json, then the report (report.md on stdout, or
    report.json with `as_json`); the worst stage's exit code."""
    prepared = prepare(cfg)  # the accuracy stage's dataset and lm_eval, before anything boots
    if cfg.validate.bench is not None:  # and the bench's request set and prompts
        checked_inputs(*protocol_of(cfg))
    scorer = None if prepared is None else Scorer(prepared, directory / "accuracy")
    write_config(directory, cfg)
    progress(f"run directory {shlex.quote(str(directory))}")
    with stop_signals_as_interrupt():  # SIGTERM (a scheduler's limit) ends it as Ctrl-C does
        results = _stages(cfg, directory, scorer, keep_going)
    code = worst(r.exit_code for r in results)
    write_atomic(directory / VALIDATE_JSON, redact_text(json_text(  # a stage's detail may
        {"stages": [r.to_dict() for r in results], "exit_code": code})))
    report, text = write_report([directory], directory)
    if as_json:
        print_json(report.to_dict(), sort_keys=True)
    else:
        sys.stdout.write(text)
    progress(f"report: {shlex.quote(str(directory / REPORT_MD))}")
    return code


def _stage_calls(cfg: ValidatePrimary, directory: Path, scorer: Scorer | None,
                 ) -> list[tuple[str, Callable[[], StageResult]]]:
    """The stages in order; the bench lends the accuracy stage's `scorer` each arm's first
    cell, so an arm's server boots once for both."""
    asked = Verdicts()  # vLLM's answers, the smoke's shared with the bench and accuracy
    return [("checkpoint", lambda: stages.checkpoint(cfg, directory / "checkpoint")),
            ("tests", lambda: stages.tests(cfg, directory / "tests")),
            ("smoke", lambda: stages.smoke(cfg, directory / "smoke", asked)),
            ("bench", lambda: stages.bench(cfg, directory / "bench", scorer, asked)),
            ("accuracy", lambda: stages.accuracy(cfg, scorer, asked))]


def _stages(cfg: ValidatePrimary, directory: Path, scorer: Scorer | None,
            keep_going: bool) -> list[StageResult]:
    """Every stage's result, in order; after Ctrl-C or a failure (unless `keep_going`) the
    remaining stages are "not run"."""
    results: list[StageResult] = []
    ended = ""  # why the remaining stages do not run
    for name, call in _stage_calls(cfg, directory, scorer):
        if ended:
            results.append(StageResult(name, Status.not_run, 0, f"not run: {ended}"))
            continue
        progress(f"stage {name}")
        try:
            result = call()
        except KeyboardInterrupt:
            result = StageResult(name, Status.failed, int(ExitCode.INTERRUPTED), "interrupted")
            if name == "bench":
                stages.summarize_interrupted_bench(directory / "bench")
        except DsparkError as e:
            result = StageResult(name, Status.failed, int(e.exit_code), e.message)
        results.append(result)
        progress(f"stage {name}: {result.status.value}: {result.detail}")
        if result.exit_code == ExitCode.INTERRUPTED:
            ended = "interrupted"
        elif result.status is Status.failed and not keep_going:
            ended = f"stage {name} failed (--keep-going runs the rest)"
    return results
