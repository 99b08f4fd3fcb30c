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
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.cli.command import Command
from dspark_cli.errors import DsparkError, ExitCode, worst
from dspark_cli.paths import REPORT_MD, VALIDATE_JSON
from dspark_cli.untrusted import write_atomic

if TYPE_CHECKING:  # the stages' machinery is imported when a run starts
    from dspark_cli.accuracy.run import Scorer
    from dspark_cli.config.validate import ValidatePrimary
    from dspark_cli.validate.stages import StageResult


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
    from dspark_cli.config import validate as schema

    schema.register()


def run(cfg: ValidatePrimary, opts: argparse.Namespace) -> int:
    if opts.dry_run:
        return _dry_run(cfg, opts)
    from dspark_cli.launch.record import run_dir

    return _run(cfg, run_dir(), opts)


def _dry_run(cfg: ValidatePrimary, opts: argparse.Namespace) -> int:
    """Every stage's plan as the run would start it: the smoke's launch where `deploy.target`
    runs it (its node layout checked, the target's own checks), the bench's every arm."""
    from dspark_cli.accuracy.run import input_findings as accuracy_findings
    from dspark_cli.bench.arms import compose_arms
    from dspark_cli.bench.dataset import input_findings
    from dspark_cli.bench.dry_run import estimate_of
    from dspark_cli.bench.dry_run import plan_dict as bench_dict
    from dspark_cli.bench.dry_run import plan_text as bench_text
    from dspark_cli.bench.workflow import protocol_of
    from dspark_cli.deploy.start import deploy_target, dry_preflight
    from dspark_cli.launch import checks
    from dspark_cli.launch.plan import build_plan
    from dspark_cli.launch.rules import checked_layout
    from dspark_cli.validate.stages import plan_doc, plan_text

    directory = Path.cwd() / "runs" / "validate" / "<time>"
    plan = build_plan(cfg)
    checked_layout(plan)  # refused as the smoke would refuse it
    target = deploy_target(cfg)
    findings = list(dry_preflight(cfg, plan, target))
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
                 if opts.json else bench_text(protocol, dataset, arms, directory / "bench",
                                              estimate, commands=opts.commands))
    if opts.json:
        launch = target.render_json(cfg, plan, tuple(findings))
        print(json.dumps(plan_doc(cfg, directory, launch, bench), indent=2))
    else:
        sys.stdout.write(plan_text(cfg, directory, target.render(cfg, plan), bench))
    checks.print_findings(findings)
    return checks.exit_code(findings)


def _stage_runner(cfg: ValidatePrimary, directory: Path, scorer: Scorer | None,
                  ) -> list[tuple[str, Callable[[], StageResult]]]:
    """The stages in order; the bench lends the accuracy stage's `scorer` each arm's first
    cell, so an arm's server boots once for both."""
    from dspark_cli.validate import stages
    from dspark_cli.vllm.accepts import Verdicts

    asked = Verdicts()  # vLLM's answers, the smoke's shared with the bench and accuracy
    return [("checkpoint", lambda: stages.checkpoint(cfg, directory / "checkpoint")),
            ("tests", lambda: stages.tests(cfg, directory / "tests")),
            ("smoke", lambda: stages.smoke(cfg, directory / "smoke", asked)),
            ("bench", lambda: stages.bench(cfg, directory / "bench", scorer, asked)),
            ("accuracy", lambda: stages.accuracy(cfg, scorer, asked))]


def _run(cfg: ValidatePrimary, directory: Path, opts: argparse.Namespace) -> int:
    from dspark_cli.accuracy.run import Scorer, prepare
    from dspark_cli.console import progress
    from dspark_cli.launch.record import write_config
    from dspark_cli.launch.secrets import redact_text
    from dspark_cli.report.markdown import write_report
    from dspark_cli.server.process import stop_signals_as_interrupt

    prepared = prepare(cfg)  # the accuracy stage's dataset and lm_eval, before anything boots
    if cfg.validate.bench is not None:  # and the bench's request set and prompts
        from dspark_cli.bench.dataset import checked_inputs
        from dspark_cli.bench.workflow import protocol_of

        checked_inputs(*protocol_of(cfg))
    scorer = None if prepared is None else Scorer(prepared, directory / "accuracy")
    write_config(directory, cfg)
    progress(f"run directory {shlex.quote(str(directory))}")
    with stop_signals_as_interrupt():  # SIGTERM (a scheduler's limit) ends it as Ctrl-C does
        results = _stages(cfg, directory, scorer, keep_going=opts.keep_going)
    code = worst(r.exit_code for r in results)
    write_atomic(directory / VALIDATE_JSON, redact_text(json.dumps(  # a stage's detail may
        {"stages": [r.to_dict() for r in results], "exit_code": code}, indent=2) + "\n"))
    report, text = write_report([directory], directory)
    if opts.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        sys.stdout.write(text)
    progress(f"report: {shlex.quote(str(directory / REPORT_MD))}")
    return code


def _stages(cfg: ValidatePrimary, directory: Path, scorer: Scorer | None,
            keep_going: bool) -> list[StageResult]:
    """Every stage's result, in order; after Ctrl-C or a failure (unless `keep_going`) the
    remaining stages are "not run"."""
    from dspark_cli.console import progress
    from dspark_cli.status import Status
    from dspark_cli.validate.stages import StageResult, summarize_interrupted_bench

    results: list[StageResult] = []
    ended = ""  # why the remaining stages do not run
    for name, call in _stage_runner(cfg, directory, scorer):
        if ended:
            results.append(StageResult(name, Status.not_run, 0, f"not run: {ended}"))
            continue
        progress(f"stage {name}")
        try:
            result = call()
        except KeyboardInterrupt:
            result = StageResult(name, Status.failed, int(ExitCode.INTERRUPTED), "interrupted")
            if name == "bench":
                summarize_interrupted_bench(directory / "bench")
        except DsparkError as e:
            result = StageResult(name, Status.failed, int(e.exit_code), e.message)
        results.append(result)
        progress(f"stage {name}: {result.status.value}: {result.detail}")
        if result.exit_code == ExitCode.INTERRUPTED:
            ended = "interrupted"
        elif result.status is Status.failed and not keep_going:
            ended = f"stage {name} failed (--keep-going runs the rest)"
    return results


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
