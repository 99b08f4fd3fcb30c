"""The accuracy stage's side effects: the pinned dataset verified and lm_eval's interpreter
checked before anything boots (`prepare`), then lm_eval run against every arm of `bench.arms`.
An arm is scored on its first bench cell's server, after that cell's own load and probes (the
bench stage's hook, `Scorer.in_cell`), so no server boots twice for validate; an arm the bench
did not reach (`validate.bench=null`, no cell of the arm got through its load, a re-run that
skipped finished cells) gets its own server through the one start step (`bench/runner.py`).
The record is rewritten after every arm, so an interrupted stage keeps what it scored."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dspark_cli.accuracy.plan import (
    FILTER,
    METRIC,
    OFFLINE_ENV,
    TASK,
    AccuracySpec,
    accuracy_spec,
    default_python,
    eval_argv,
    task_yaml,
)
from dspark_cli.accuracy.records import FAILED, SCORED, AccuracyRecord, ArmScore
from dspark_cli.bench.arms import Arm, compose_arms
from dspark_cli.bench.runner import ArmLaunch, arm_launch
from dspark_cli.bench.workflow import claimed_ports, protocol_of
from dspark_cli.console import json_text, progress
from dspark_cli.errors import DsparkError, ExitCode, MissingExtra, ServerError, UsageError
from dspark_cli.launch.secrets import SCRUB
from dspark_cli.paths import ACCURACY_JSON, ARMS_DIR, LM_EVAL_LOG
from dspark_cli.server import watchdog
from dspark_cli.server.deployment import Watch
from dspark_cli.server.logscan import fatal_patterns
from dspark_cli.server.watchdog import descendants, stop_group
from dspark_cli.status import Finding, Status
from dspark_cli.untrusted import write_atomic
from dspark_cli.vllm.accepts import Verdicts

if TYPE_CHECKING:
    from dspark_cli.config.validate import ValidatePrimary
    from dspark_cli.server.session import ServerSession

DATASET_RULE, PYTHON_RULE = "accuracy-dataset", "accuracy-lm-eval"

_VERSION = ("import importlib.metadata as m, importlib.util as u\n"
            "if u.find_spec('lm_eval') is None: raise SystemExit(1)\n"
            "print(m.version('lm_eval'))")


def verified_documents(spec: AccuracySpec) -> tuple[bytes, int]:
    """The dataset's bytes and its number of documents; UsageError (before any server boots)
    when it is missing, its SHA-256 is not the pin, or a line is no GSM8K document."""
    try:
        data = spec.dataset.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read the accuracy dataset validate.accuracy.dataset="
                         f"{spec.dataset}: {e.strerror or e}.") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != spec.sha256:
        raise UsageError(
            f"the accuracy dataset {spec.dataset} has SHA-256 {actual}, not the pinned "
            f"{spec.sha256} (validate.accuracy.sha256): it is not the file this run was "
            "configured to score, so no server was started.",
            hint="restore the file, or pin the one you mean with validate.accuracy.sha256="
            "$(sha256sum FILE | cut -d' ' -f1)")
    try:
        rows = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        bad = next((i for i, r in enumerate(rows, 1) if not isinstance(r, dict)
                    or not isinstance(r.get("question"), str)
                    or "####" not in str(r.get("answer", ""))), None)
    except (UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"{spec.dataset} is not JSONL: {e}.") from None
    if bad is not None or not rows:
        raise UsageError(f"{spec.dataset}: " + (f"line {bad} is" if bad else "no line is") +
                         " a GSM8K document ({\"question\": ..., \"answer\": \"... #### N\"}).")
    return data, len(rows)


class MissingEval(MissingExtra):
    """No interpreter dspark can find has lm_eval: a missing optional dependency (exit 4)."""

    exit_code = ExitCode.MISSING_ENGINE


def lm_eval_version(python: str) -> str:
    """lm_eval's version in `python`; exit 4 naming how to install it when it cannot import
    it."""
    try:
        done = subprocess.run([python, "-c", _VERSION], capture_output=True, text=True,
                              timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UsageError(f"validate.accuracy.python={python} cannot be run ({e}).") from None
    if done.returncode != 0:
        raise MissingEval("lm_eval", "validate's accuracy stage", python=python,
                          elsewhere="`make setup` in a checkout (it makes .venv-eval, which "
                          "validate finds by itself), or name an interpreter that has it with "
                          "DSPARK_EVAL_PYTHON or validate.accuracy.python; "
                          "validate.accuracy=null skips the stage")
    return done.stdout.strip()


def _spec(cfg: ValidatePrimary) -> AccuracySpec | None:
    return accuracy_spec(cfg.validate.accuracy, default_python(),
                         [str(a) for a in cfg.bench.arms])


def input_findings(cfg: ValidatePrimary) -> tuple[Finding, ...]:
    """The stage's inputs as a dry run's findings: the pinned dataset, and an interpreter that
    finds lm_eval (asked without importing it)."""
    spec = _spec(cfg)
    if spec is None:
        return ()
    found = []
    try:
        verified_documents(spec)
        found.append(Finding(DATASET_RULE, Status.passed, f"{spec.dataset} as pinned",
                             "validate.accuracy.dataset"))
    except DsparkError as e:
        found.append(Finding(DATASET_RULE, Status.failed, e.message,
                             "validate.accuracy.dataset"))
    try:
        lm_eval_version(spec.python)
        found.append(Finding(PYTHON_RULE, Status.passed, f"{spec.python} has lm_eval",
                             "validate.accuracy.python"))
    except DsparkError as e:
        found.append(Finding(PYTHON_RULE, Status.failed, e.message,
                             "validate.accuracy.python"))
    return tuple(found)


@dataclass(frozen=True)
class Prepared:
    """The stage's inputs, checked before validate's first stage boots anything."""

    spec: AccuracySpec
    data: bytes  # the dataset's verified bytes: what lm_eval reads
    documents: int
    version: str  # lm_eval's


def prepare(cfg: ValidatePrimary) -> Prepared | None:
    """Exit 2 on a dataset that is not the pinned one, or an interpreter without lm_eval; None
    when `validate.accuracy=null`."""
    spec = _spec(cfg)
    if spec is None:
        return None
    data, documents = verified_documents(spec)
    return Prepared(spec, data, documents, lm_eval_version(spec.python))


def _run_eval(argv: list[str], log: Path, env: Mapping[str, str], timeout_s: float,
              abort: Callable[[], str | None]) -> str | None:
    """lm_eval to its end; the reason it did not finish cleanly, or None."""
    start = time.monotonic()
    with log.open("wb") as out:
        proc = watchdog.popen(argv, 0.0, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=dict(env))
        try:
            while (code := proc.poll()) is None:
                why = abort() or (f"lm_eval ran past validate.accuracy.timeout_s={timeout_s}"
                                  if time.monotonic() - start > timeout_s else None)
                if why:
                    stop_group(proc.pid, grace=0.0, also=descendants(proc.pid))
                    proc.wait()
                    return why
                time.sleep(0.2)
        except BaseException:
            stop_group(proc.pid, grace=0.0, also=descendants(proc.pid))
            proc.wait()
            raise
    return None if code == 0 else f"lm_eval exited {code}; its output: {log}"


def scored(out_dir: Path, arm: str, version: str, root: Path) -> ArmScore:
    """lm_eval's results and logged samples under `out_dir`, read as one arm's score (the
    samples' path relative to the stage's directory `root`)."""
    results = sorted(out_dir.rglob("results_*.json"))
    samples = sorted(out_dir.rglob(f"samples_{TASK}_*.jsonl"))
    if not results or not samples:
        return ArmScore(arm, FAILED, f"lm_eval wrote no results or samples under {out_dir}")
    try:
        score = json.loads(results[-1].read_text())["results"][TASK][f"{METRIC},{FILTER}"]
        correct: dict[int, bool] = {}
        for line in samples[-1].read_text().splitlines():
            row = json.loads(line) if line.strip() else None
            if row is not None and row.get("filter", FILTER) == FILTER:
                correct[int(row["doc_id"])] = float(row[METRIC]) == 1.0
    except (OSError, ValueError, KeyError, TypeError) as e:
        return ArmScore(arm, FAILED, f"lm_eval's output under {out_dir} is unreadable: {e}")
    if not correct or abs(float(score) - sum(correct.values()) / len(correct)) > 1e-9:
        return ArmScore(arm, FAILED, f"lm_eval's score {score} is not its samples' mean")
    return ArmScore(arm, SCORED, "", round(float(score), 6), correct, version,
                    str(samples[-1].relative_to(root)))


def _eval_env(launch: ArmLaunch, directory: Path) -> dict[str, str]:
    env = {**os.environ, **launch.env, **OFFLINE_ENV,
           "HF_DATASETS_CACHE": str(directory / "hf-datasets")}
    if env.get("VLLM_API_KEY") and not env.get("OPENAI_API_KEY"):
        env["OPENAI_API_KEY"] = env["VLLM_API_KEY"]  # what local-completions sends
    return env


class Scorer:
    """lm_eval against arms' servers that are up, into the stage's directory; each arm's score
    kept by name. The bench stage lends it each arm's first cell (`in_cell`, after the cell's
    own load and probes), so the stage boots only the arms the bench did not reach."""

    def __init__(self, prepared: Prepared, directory: Path) -> None:
        self.prepared, self.directory = prepared, directory
        self.scores: dict[str, ArmScore] = {}

    def _task_dir(self) -> Path:
        task_dir = self.directory / "task"
        if not task_dir.is_dir():
            task_dir.mkdir(parents=True)
            copy = task_dir / f"{TASK}.jsonl"  # what lm_eval reads is the verified bytes
            copy.write_bytes(self.prepared.data)
            (task_dir / f"{TASK}.yaml").write_text(task_yaml(self.prepared.spec, copy))
        return task_dir

    def score(self, arm: Arm, launch: ArmLaunch, session: ServerSession,
              cell: str | None) -> ArmScore:
        """lm_eval against `session`'s healthy server; `cell`: the bench cell it is (None:
        the arm's own boot)."""
        spec, arm_dir = self.prepared.spec, self.directory / ARMS_DIR / arm.name
        try:  # a failure here is the arm's score, not the end of the bench cell lending it
            arm_dir.mkdir(parents=True, exist_ok=True)
            argv = eval_argv(spec, self._task_dir(), arm.plan.served_model_name,
                             session.base_url, arm_dir / "lm_eval")
            failed = _run_eval(argv, arm_dir / LM_EVAL_LOG, _eval_env(launch, self.directory),
                               spec.timeout_s, session.stop_reason)
        except UsageError as e:
            failed = e.message
        except OSError as e:
            failed = f"cannot write lm_eval's files under {arm_dir}: {e.strerror or e}"
        result = replace(ArmScore(arm.name, FAILED, failed) if failed else scored(
            arm_dir / "lm_eval", arm.name, self.prepared.version, self.directory), cell=cell)
        self.scores[arm.name] = result
        _said(result)
        return result

    def in_cell(self, cell: str, arm: Arm, launch: ArmLaunch, session: ServerSession) -> None:
        """The bench's hook: an arm not scored yet is scored on this cell's server."""
        if arm.name not in self.scores:
            progress(f"accuracy: {arm.name}: lm_eval {TASK} on bench cell {cell}'s server")
            self.score(arm, launch, session, cell)

    def boot_and_score(self, arm: Arm, launch: ArmLaunch, cfg: ValidatePrimary) -> ArmScore:
        """The arm's own server booted, scored, stopped."""
        from dspark_cli.server.session import ServerSession  # the live session: a dry run plans

        arm_dir = self.directory / ARMS_DIR / arm.name
        arm_dir.mkdir(parents=True, exist_ok=True)
        session = ServerSession(launch.deployment(arm_dir, {}),
                                Watch(launch.ready_timeout_s, fatal_patterns(cfg.logs)))
        try:
            with session:
                boot = session.wait_healthy()
                progress(f"accuracy: {arm.name}: healthy after {boot:.1f} s; lm_eval {TASK}")
                return self.score(arm, launch, session, None)
        except ServerError as e:
            self.scores[arm.name] = ArmScore(arm.name, FAILED, f"server: {e.reason}")
            _said(self.scores[arm.name])
            return self.scores[arm.name]


def _said(last: ArmScore) -> None:
    progress(f"accuracy: {last.arm}: " + (f"{last.score:.4f} ({len(last.correct)} documents)"
             if last.status == SCORED else f"FAILED: {last.reason}"))


def accuracy_in(cfg: ValidatePrimary, scorer: Scorer,
                verdicts: Verdicts | None = None) -> AccuracyRecord:
    """The stage into `scorer.directory`: every arm of `bench.arms` the bench did not score
    booted in turn (each checked before the first boot, `verdicts`: vLLM's answers the command
    already has); the record rewritten after each."""
    prepared = scorer.prepared
    protocol, _ = protocol_of(cfg)
    with claimed_ports(cfg) as claimed:
        arms = compose_arms(claimed, protocol)
        pending = {n: arm_launch(a, scorer.directory / ARMS_DIR / n, verdicts)
                   for n, a in arms.items() if n not in scorer.scores}
        model = next(iter(arms.values())).plan.served_model_name
        for name, arm in arms.items():
            if name in pending:
                progress(f"accuracy: {name}: booting its server")
                scorer.boot_and_score(arm, pending[name], claimed)
            else:
                progress(f"accuracy: {name}: scored on bench cell {scorer.scores[name].cell}'s "
                         "server")
            scores = tuple(scorer.scores[n] for n in arms if n in scorer.scores)
            record = _record(cfg, prepared, model, scores)
            scorer.directory.mkdir(parents=True, exist_ok=True)
            write_atomic(scorer.directory / ACCURACY_JSON,
                         SCRUB(json_text(record.to_dict())))
    return record


def _record(cfg: ValidatePrimary, prepared: Prepared, model: str,
            scores: tuple[ArmScore, ...]) -> AccuracyRecord:
    synthetic = cfg.model.synthetic
    spec = prepared.spec
    return AccuracyRecord(TASK, str(spec.dataset), spec.sha256, prepared.documents,
                          spec.baseline, spec.margin, model,
                          None if synthetic is None else str(synthetic), spec.to_dict(), scores)
