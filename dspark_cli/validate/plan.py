"""`dspark validate --dry-run`: the plan of every stage as text, from the composed config.
Nothing runs, nothing is probed: the smoke's launch is `dspark serve --dry-run`'s script and the
bench's is `dspark bench --dry-run`'s plan."""

from __future__ import annotations

import shlex
from pathlib import Path

from omegaconf import DictConfig

from dspark_cli.config.plain import plain
from dspark_cli.run_files import JUNIT_XML, REPORT_JSON, REPORT_MD


def _checkpoint(cfg: DictConfig) -> list[str]:
    stage = cfg.validate.checkpoint
    pins = {k: v for k, v in (plain(cfg.model.expected) or {}).items() if v is not None}
    content = (f"every file against manifest {stage.manifest}" if stage.manifest
               else "Hugging Face cache blobs against their names" if stage.hash else "no")
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
    return [f"2. focused tests: in {stage.source}",
            f"   {' '.join(shlex.quote(a) for a in argv)}"]


def _smoke(cfg: DictConfig, script: str) -> list[str]:
    from dspark_cli.smoke.expectations import expectations

    exp = expectations(cfg)
    spec = (f"; speculative counters with {exp.spec.method} K={exp.spec.k} ({exp.spec.rule})"
            if exp.spec else "")
    lines = ["3. smoke: boot this launch, then /health, the startup lines "
             f"({', '.join(p.name for p in exp.required)}), one request of {exp.max_tokens} "
             f"tokens{spec}, the fatal-line scan, teardown:"]
    return lines + [f"   {line}" for line in script.rstrip("\n").splitlines()]


def plan_text(cfg: DictConfig, directory: Path, script: str, bench_plan: str | None) -> str:
    lines = [f"dspark validate: the stages, in order, into {directory} (stops at the first "
             "failing stage unless --keep-going)", ""]
    lines += _checkpoint(cfg) + _tests(cfg, directory) + _smoke(cfg, script)
    if bench_plan is None:
        lines.append("4. bench: skipped (validate.bench=null)")
    else:
        lines.append(f"4. bench: protocol {cfg.bench.name}, into {directory / 'bench'}:")
        lines += [f"   {line}" for line in bench_plan.rstrip("\n").splitlines()]
    lines.append(f"5. report: {directory / REPORT_MD} and {directory / REPORT_JSON}")
    return "\n".join(lines) + "\n"
