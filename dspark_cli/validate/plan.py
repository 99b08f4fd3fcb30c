"""`dspark validate --dry-run`: the plan of every stage as text (or a dict for --json), from the
composed config. Nothing runs, nothing is probed: the smoke's launch is what `dspark serve
--dry-run` prints for the deploy target and the bench's is `dspark bench --dry-run`'s plan."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from dspark_cli.config.plain import plain
from dspark_cli.launch.secrets import redact_urls
from dspark_cli.run_files import JUNIT_XML, REPORT_JSON, REPORT_MD


def _pins(cfg: DictConfig) -> dict[str, Any]:
    return {k: v for k, v in (plain(cfg.model.expected) or {}).items() if v is not None}


def _content(cfg: DictConfig) -> str:
    stage = cfg.validate.checkpoint
    return (f"every file against manifest {stage.manifest}" if stage.manifest
            else "Hugging Face cache blobs against their names" if stage.hash else "no")


def _checkpoint(cfg: DictConfig) -> list[str]:
    pins, content = _pins(cfg), _content(cfg)
    return [f"1. checkpoint: verify-checkpoint of {cfg.model.path}: config, index, shard "
            "headers, confidence head",
            f"   pins: {', '.join(f'{k}={v}' for k, v in sorted(pins.items())) or 'none'}",
            f"   content hashes: {content}"]


def _tests(cfg: DictConfig, directory: Path) -> list[str]:
    stage = cfg.validate.tests
    if not stage.node_ids:
        return ["2. focused tests: not run (validate.tests.node_ids is empty)"]
    from dspark_cli.validate.stages import tests_argv

    argv = tests_argv(cfg, directory / "tests" / JUNIT_XML)
    base = (f"merge-base with {stage.upstream}" if stage.upstream
            else "none (validate.tests.upstream is null)")
    return [f"2. focused tests: in {stage.source}",
            f"   {' '.join(shlex.quote(a) for a in argv)}",
            f"   source revision: git branch, head, base ({base}), changed files, diff size",
            *(f"   lint: {command}" for command in stage.lint)]


def _smoke(cfg: DictConfig, script: str) -> list[str]:
    from dspark_cli.smoke.expectations import expectations

    exp = expectations(cfg)
    spec = (f"; speculative counters with {exp.spec.method} K={exp.spec.k} ({exp.spec.rule})"
            if exp.spec else "")
    lines = ["3. smoke: boot this launch, then /health, the startup lines "
             f"({', '.join(p.name for p in exp.required)}), one request of {exp.max_tokens} "
             f"tokens{spec}, the fatal-line scan, teardown:"]
    return lines + [f"   {line}" for line in script.rstrip("\n").splitlines()]


def _accuracy(cfg: DictConfig, directory: Path) -> tuple[Any, list[str]]:
    """The accuracy stage's spec (None: skipped) and its lines: every arm, lm_eval's command
    with the arm's server URL and served name left to the boot."""
    from dspark_cli.accuracy.plan import TASK, accuracy_spec, default_python, eval_argv

    spec = accuracy_spec(plain(cfg.validate.accuracy), default_python(),
                         [str(a) for a in cfg.bench.arms])
    if spec is None:
        return None, ["5. accuracy: skipped (validate.accuracy=null)"]
    stage = directory / "accuracy"
    argv = eval_argv(spec, stage / "task", "<served name>", "http://<host>:<port>",
                     stage / "arms" / "<arm>" / "lm_eval")
    return spec, [
        f"5. accuracy: lm_eval task {TASK} on {spec.dataset} (sha256 {spec.sha256}"
        + (f", the first {spec.limit} documents" if spec.limit else "") + "), against each arm "
        f"of bench.arms ({', '.join(map(str, cfg.bench.arms))}) on "
        + ("its first bench cell's server (its own boot if the bench does not reach it)"
           if cfg.validate.bench is not None else "its own server, booted in turn")
        + f"; each arm's difference to {spec.baseline} judged at +-{spec.margin:g}:",
        f"   {' '.join(shlex.quote(a) for a in argv)}"]


def plan_text(cfg: DictConfig, directory: Path, script: str, bench_plan: str | None) -> str:
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


def plan_doc(cfg: DictConfig, directory: Path, launch: dict[str, Any],
             bench: dict[str, Any] | None) -> dict[str, Any]:
    """The plan of every stage for --json: `launch` is the smoke's (the deploy target's dry-run
    document, preflight included), `bench` the bench's plan (None: skipped)."""
    from dspark_cli.smoke.expectations import expectations
    from dspark_cli.validate.stages import tests_argv

    tests = cfg.validate.tests
    exp = expectations(cfg)
    accuracy = _accuracy(cfg, directory)[0]
    return {
        "run_dir": str(directory),
        "stages": [
            {"name": "checkpoint", "path": redact_urls(str(cfg.model.path)),
             "pins": _pins(cfg), "content_hashes": _content(cfg)},
            {"name": "tests", "run": bool(tests.node_ids), "source": tests.source,
             "upstream": tests.upstream, "lint": list(tests.lint),
             "command": tests_argv(cfg, directory / "tests" / JUNIT_XML)
             if tests.node_ids else None},
            {"name": "smoke", "startup_lines": [p.name for p in exp.required],
             "max_tokens": exp.max_tokens, "launch": launch},
            {"name": "bench", "run": bench is not None,
             "protocol": str(cfg.bench.name) if bench is not None else None, "plan": bench},
            {"name": "accuracy", "run": accuracy is not None,
             "settings": None if accuracy is None else accuracy.to_dict(),
             "arms": [str(a) for a in cfg.bench.arms] if accuracy is not None else []},
            {"name": "report", "files": [str(directory / REPORT_MD),
                                         str(directory / REPORT_JSON)]},
        ],
    }
