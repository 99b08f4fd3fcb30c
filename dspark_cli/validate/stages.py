"""The stages of `dspark validate`, each a thin call into the library that owns the work
(`checkpoint/`, `smoke/workflow.py`, `bench/workflow.py`), writing its records under its own
folder of the run directory and returning a frozen `StageResult`.

`dspark validate --dry-run`: the plan of every stage as text (or a dict for --json), from the
composed config. Nothing runs, nothing is probed: the smoke's launch is what `dspark serve
--dry-run` prints for the deploy target and the bench's is `dspark bench --dry-run`'s plan."""

from __future__ import annotations

import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.accuracy.plan import TASK, accuracy_spec, default_python, eval_argv
from dspark_cli.accuracy.records import AccuracyVerdict, words
from dspark_cli.accuracy.run import accuracy_in
from dspark_cli.bench import records
from dspark_cli.bench.workflow import ask_vllm_ahead, bench_in
from dspark_cli.checkpoint.verify import checkpoint_root, content_request, verify_checkpoint
from dspark_cli.console import json_text
from dspark_cli.deploy.start import ensure_model
from dspark_cli.errors import ExitCode, UsageError
from dspark_cli.launch.secrets import redact_text, redact_urls
from dspark_cli.paths import (
    CHECKPOINT_JSON,
    JUNIT_XML,
    LINT_JSON,
    PYTEST_LOG,
    REPORT_JSON,
    REPORT_MD,
    SOURCE_JSON,
    TESTS_JSON,
)
from dspark_cli.smoke.expectations import expectations
from dspark_cli.smoke.workflow import smoke_in
from dspark_cli.status import Status
from dspark_cli.untrusted import write_atomic
from dspark_cli.validate.source import LintPlan, changed_python, lint, revision

if TYPE_CHECKING:  # the accuracy stage's machinery is imported when it runs
    from dspark_cli.accuracy.run import Scorer
    from dspark_cli.config.validate import ValidatePrimary
    from dspark_cli.vllm.accepts import Verdicts


@dataclass(frozen=True)
class StageResult:
    name: str
    status: Status
    exit_code: int
    detail: str
    directory: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "exit_code": self.exit_code,
                "detail": self.detail, "directory": self.directory}


def _write_json(path: Path, data: Any) -> None:
    """A stage's record, redacted (a checkpoint's path may hold a URL password)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, redact_text(json_text(data)))


def checkpoint(cfg: ValidatePrimary, directory: Path) -> StageResult:
    """verify-checkpoint's structure, pins and heads (and hashes when asked) on model.path."""
    ensure_model(cfg)  # the tiny model is made before it can be verified
    if not Path(cfg.model.path).expanduser().is_dir():
        return StageResult("checkpoint", Status.skipped, 0, f"model.path {cfg.model.path} is "
                           "not a local directory (a hub id is checked by vLLM at load)")
    stage = cfg.validate.checkpoint
    root = checkpoint_root(cfg.model.path)
    content = content_request(root, hash_blobs=stage.hash,
                              manifest=Path(stage.manifest) if stage.manifest else None)
    report = verify_checkpoint(root, cfg.model.expected, content)
    _write_json(directory / CHECKPOINT_JSON, report.to_dict())
    hashed = (f", {report.content.hashed_files} files hashed" if report.content else "")
    if report.ok:
        return StageResult("checkpoint", Status.passed, 0,
                           f"{report.num_shards} shard(s), {report.total_bytes:,} bytes, "
                           f"every check passed{hashed}", str(directory))
    problems = "; ".join(f"{p.subject}: {p.code}" for p in report.problems[:5])
    return StageResult("checkpoint", Status.failed, int(ExitCode.CHECK_FAILED),
                       f"{len(report.problems)} problems: {problems}", str(directory))


def junit_counts(path: Path) -> dict[str, int]:
    """passed/failed/errors/skipped from pytest's JUnit XML."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites)
             for k in ("tests", "failures", "errors", "skipped")}
    return {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"]}


def tests_argv(cfg: ValidatePrimary, junit: Path) -> list[str]:
    stage = cfg.validate.tests
    python = stage.python or sys.executable
    return [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
            *stage.node_ids]


def tests(cfg: ValidatePrimary, directory: Path) -> StageResult:
    """The focused tests (pytest node ids) in the vLLM source tree; counts from JUnit XML."""
    stage = cfg.validate.tests
    if not stage.node_ids:
        return StageResult("tests", Status.not_run, 0, "no focused tests configured "
                           "(validate.tests.node_ids)")
    source = Path(stage.source or "").expanduser()
    if not stage.source or not source.is_dir():
        raise UsageError(f"validate.tests.source={stage.source} is not a directory; give the "
                         "vLLM source tree the focused tests run in.")
    directory.mkdir(parents=True, exist_ok=True)
    junit, log = directory / JUNIT_XML, directory / PYTEST_LOG
    argv = tests_argv(cfg, junit)
    with log.open("wb") as out:
        try:
            done = subprocess.run(argv, cwd=source, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=stage.timeout_s, check=False)
            code: int | None = done.returncode
        except subprocess.TimeoutExpired:
            code = None
    counts = junit_counts(junit) if junit.is_file() else {}
    linted = _revision_and_lint(cfg, source, directory)
    passed = code == 0 and counts.get("passed", 0) > 0 and not linted
    detail = (f"timed out after {stage.timeout_s} s" if code is None else
              f"pytest exit {code}: " + ", ".join(f"{n} {k}" for k, n in counts.items())) + (
        f"; lint failed: {linted}" if linted else "")
    _write_json(directory / TESTS_JSON, {
        "status": "passed" if passed else "failed", "source": str(source),
        "node_ids": list(stage.node_ids), "command": argv, "returncode": code,
        "counts": counts, "detail": detail, "log": str(log)})
    return StageResult("tests", Status.passed if passed else Status.failed,
                       0 if passed else int(ExitCode.CHECK_FAILED), detail, str(directory))


def _revision_and_lint(cfg: ValidatePrimary, tree: Path, directory: Path) -> str:
    """Record the tree's revision (source.json) and run the lint commands in it (lint.json);
    the failed commands, or "" when every one passed (or none is configured)."""
    stage = cfg.validate.tests
    rev = revision(tree, stage.upstream or None)
    _write_json(directory / SOURCE_JSON, rev.to_dict())
    if not stage.lint:
        return ""
    plan = LintPlan(list(stage.lint), stage.lint_timeout_s, changed_python(tree, rev))
    results = lint(tree, plan, directory)
    _write_json(directory / LINT_JSON, {"results": [r.to_dict() for r in results]})
    return ", ".join(r.command for r in results if r.status == "failed")


def smoke(cfg: ValidatePrimary, directory: Path, verdicts: Verdicts) -> StageResult:
    """The smoke; vLLM's verdict on its command also answers for the bench's arms (into
    `verdicts`, which the bench stage is given)."""
    if cfg.validate.bench is not None:
        ask_vllm_ahead(cfg, verdicts)
    doc = smoke_in(cfg, directory, verdicts)
    code = int(doc.verdict.exit_code)
    return StageResult("smoke", Status.passed if code == 0 else Status.failed, code,
                       doc.verdict.summary, str(directory))


def bench(cfg: ValidatePrimary, directory: Path, scorer: Scorer | None,
          verdicts: Verdicts) -> StageResult:
    """The bench protocol; `scorer`: the accuracy stage's, lent each arm's first cell;
    `verdicts`: vLLM's answers from the smoke stage."""
    if cfg.validate.bench is None:
        return StageResult("bench", Status.skipped, 0, "validate.bench=null")
    summary = bench_in(cfg, directory, cfg.validate.bench.stop_on_failure,
                       None if scorer is None else scorer.in_cell, verdicts).summary
    invalid = [c.cell_id for c in summary.cells if not c.valid]
    detail = f"{len(summary.cells) - len(invalid)} of {len(summary.cells)} cells valid" + (
        f" (invalid: {', '.join(invalid)})" if invalid else "")
    return StageResult("bench", Status.failed if invalid else Status.passed,
                       int(ExitCode.CHECK_FAILED) if invalid else 0, detail, str(directory))


def accuracy(cfg: ValidatePrimary, scorer: Scorer | None, verdicts: Verdicts) -> StageResult:
    """lm_eval against every bench arm's server (those the bench stage lent already scored);
    fails when an arm could not be scored or scores differently from the baseline."""
    if scorer is None:
        return StageResult("accuracy", Status.skipped, 0, "validate.accuracy=null")
    record = accuracy_in(cfg, scorer, verdicts)
    directory = scorer.directory
    failed = [a.arm for a in record.arms if a.status != "scored"]
    compared = record.comparisons()
    different = [c.arm for c in compared if c.verdict is AccuracyVerdict.DIFFERENT]
    detail = "; ".join([", ".join(f"{a.arm} {a.score:.4f}" if a.score is not None
                                  else f"{a.arm} failed" for a in record.arms),
                        *(f"{c.arm} vs {c.baseline}: {words(c)}" for c in compared)])
    bad = failed or different
    return StageResult("accuracy", Status.failed if bad else Status.passed,
                       int(ExitCode.CHECK_FAILED) if bad else 0, detail, str(directory))


def summarize_interrupted_bench(directory: Path) -> None:
    """After Ctrl-C: the summary of the cells that finished, so the report shows them."""
    if directory.is_dir() and records.collect(directory):
        records.merge(directory)


def _pins(cfg: ValidatePrimary) -> dict[str, Any]:
    """The checkpoint's pinned facts that are set (`model.expected`; a null pin is not
    checked)."""
    expected = cfg.model.expected
    return {f.name: value for f in fields(expected)
            if (value := getattr(expected, f.name)) is not None}


def _content(cfg: ValidatePrimary) -> str:
    stage = cfg.validate.checkpoint
    return (f"every file against manifest {stage.manifest}" if stage.manifest
            else "Hugging Face cache blobs against their names" if stage.hash else "no")


def _checkpoint(cfg: ValidatePrimary) -> list[str]:
    pins, content = _pins(cfg), _content(cfg)
    return [f"1. checkpoint: verify-checkpoint of {cfg.model.path}: config, index, shard "
            "headers, confidence head",
            f"   pins: {', '.join(f'{k}={v}' for k, v in sorted(pins.items())) or 'none'}",
            f"   content hashes: {content}"]


def _tests(cfg: ValidatePrimary, directory: Path) -> list[str]:
    stage = cfg.validate.tests
    if not stage.node_ids:
        return ["2. focused tests: not run (validate.tests.node_ids is empty)"]

    argv = tests_argv(cfg, directory / "tests" / JUNIT_XML)
    base = (f"merge-base with {stage.upstream}" if stage.upstream
            else "none (validate.tests.upstream is null)")
    return [f"2. focused tests: in {stage.source}",
            f"   {' '.join(shlex.quote(a) for a in argv)}",
            f"   source revision: git branch, head, base ({base}), changed files, diff size",
            *(f"   lint: {command}" for command in stage.lint)]


def _smoke(cfg: ValidatePrimary, script: str) -> list[str]:
    exp = expectations(cfg)
    spec = (f"; speculative counters with {exp.spec.method} K={exp.spec.k} ({exp.spec.rule})"
            if exp.spec else "")
    lines = ["3. smoke: boot this launch, then /health, the startup lines "
             f"({', '.join(p.name for p in exp.required)}), one request of {exp.max_tokens} "
             f"tokens{spec}, the fatal-line scan, teardown:"]
    return lines + [f"   {line}" for line in script.rstrip("\n").splitlines()]


def _accuracy(cfg: ValidatePrimary, directory: Path) -> tuple[Any, list[str]]:
    """The accuracy stage's spec (None: skipped) and its lines: every arm, lm_eval's command
    with the arm's server URL and served name left to the boot."""
    spec = accuracy_spec(cfg.validate.accuracy, default_python(),
                         list(cfg.bench.arms))
    if spec is None:
        return None, ["5. accuracy: skipped (validate.accuracy=null)"]
    stage = directory / "accuracy"
    argv = eval_argv(spec, stage / "task", "<served name>", "http://<host>:<port>",
                     stage / "arms" / "<arm>" / "lm_eval")
    return spec, [
        f"5. accuracy: lm_eval task {TASK} on {spec.dataset} (sha256 {spec.sha256}"
        + (f", the first {spec.limit} documents" if spec.limit else "") + "), against each arm "
        f"of bench.arms ({', '.join(cfg.bench.arms)}) on "
        + ("its first bench cell's server (its own boot if the bench does not reach it)"
           if cfg.validate.bench is not None else "its own server, booted in turn")
        + f"; each arm's difference to {spec.baseline} judged at +-{spec.margin:g}:",
        f"   {' '.join(shlex.quote(a) for a in argv)}"]


def plan_text(cfg: ValidatePrimary, directory: Path, script: str, bench_plan: str | None) -> str:
    lines = [f"dspark validate: the stages, in order, into {directory} (stops at the first "
             "failing stage unless --keep-going)", ""]
    lines += _checkpoint(cfg) + _tests(cfg, directory) + _smoke(cfg, script)
    if bench_plan is None:
        lines.append("4. bench: skipped (validate.bench=null)")
    else:
        lines.append(f"4. bench: protocol {cfg.bench.name}, into {directory / 'bench'}:")
        lines += [f"   {line}" for line in bench_plan.rstrip("\n").splitlines()]
    lines += _accuracy(cfg, directory)[1]
    lines.append(f"6. report: {directory / REPORT_MD} and {directory / REPORT_JSON}")
    return "\n".join(lines) + "\n"


def plan_doc(cfg: ValidatePrimary, directory: Path, launch: dict[str, Any],
             bench: dict[str, Any] | None) -> dict[str, Any]:
    """The plan of every stage for --json: `launch` is the smoke's (the deploy target's dry-run
    document, preflight included), `bench` the bench's plan (None: skipped)."""
    tests = cfg.validate.tests
    exp = expectations(cfg)
    accuracy = _accuracy(cfg, directory)[0]
    return {
        "run_dir": str(directory),
        "stages": [
            {"name": "checkpoint", "path": redact_urls(cfg.model.path),
             "pins": _pins(cfg), "content_hashes": _content(cfg)},
            {"name": "tests", "run": bool(tests.node_ids), "source": tests.source,
             "upstream": tests.upstream, "lint": list(tests.lint),
             "command": tests_argv(cfg, directory / "tests" / JUNIT_XML)
             if tests.node_ids else None},
            {"name": "smoke", "startup_lines": [p.name for p in exp.required],
             "max_tokens": exp.max_tokens, "launch": launch},
            {"name": "bench", "run": bench is not None,
             "protocol": cfg.bench.name if bench is not None else None, "plan": bench},
            {"name": "accuracy", "run": accuracy is not None,
             "settings": None if accuracy is None else accuracy.to_dict(),
             "arms": list(cfg.bench.arms) if accuracy is not None else []},
            {"name": "report", "files": [str(directory / REPORT_MD),
                                         str(directory / REPORT_JSON)]},
        ],
    }
