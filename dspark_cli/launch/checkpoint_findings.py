"""Checkpoint findings for `serve`/`smoke`/`bench` preflight: seconds before a long boot.

When model.path is a local directory: the structural pass, the pins and the DSpark head check.
Adaptive verification without a verified confidence head is refused (vLLM would silently fall
back to an online estimator) unless `checks.allow_missing_confidence_head=true` says so on
purpose; the finding is then marked `overridden`, reported and recorded, not hidden.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.config.typed import plain, select
from dspark_cli.status import Finding, Status

if TYPE_CHECKING:  # the checkpoint modules load only when a local checkpoint is checked
    from dspark_cli.checkpoint.result import CheckpointResult, Problem

OVERRIDE_KEY = "checks.allow_missing_confidence_head"
_SHOWN = 3  # problems quoted in one finding; `dspark verify-checkpoint` lists them all
# Head problems that only matter to adaptive verification (fixed-K DSpark runs without it).
_CONFIDENCE_ONLY = frozenset({
    "confidence-head-disabled", "confidence-head-missing", "confidence-head-shape",
    "confidence-head-dtype", "confidence-head-not-finite",
})


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    """`key` of a typed config node or of the plan's rendered (dict) settings."""
    value = select(cfg, key)
    return default if value is None else value


def _summary(problems: tuple[Problem, ...] | list[Problem]) -> str:
    shown = "; ".join(f"{p.subject}: expected {p.expected}, found {p.actual}"
                      for p in problems[:_SHOWN])
    more = len(problems) - _SHOWN
    return shown + (f"; and {more} more" if more > 0 else "")


def _verify(path: Path, model_cfg: Any) -> CheckpointResult:
    from dspark_cli.checkpoint.verify import verify_checkpoint

    expected = plain(_get(model_cfg, "expected", {}))
    return verify_checkpoint(path, expected)


def _head_finding(
    report: CheckpointResult | None, method: str | None, adaptive: bool, allow: bool, why: str
) -> Finding:
    """The head verdict; `why` says why there is no report (the draft is not local)."""
    rule = "checkpoint-confidence-head"
    if method != "dspark":
        return Finding(rule, Status.skipped, "no DSpark draft in use", "speculative",
                       applies=False)
    if report is not None and not report.dspark:
        why = f"{report.path}/config.json declares no DSpark draft (no dspark_* key)"
    elif report is not None:
        from dspark_cli.checkpoint.result import Check

        problems = [p for p in report.problems_of(Check.head)
                    if adaptive or p.code not in _CONFIDENCE_ONLY]
        if not problems:
            return Finding(rule, Status.passed, "the DSpark heads are present and valid",
                           "speculative")
        if not adaptive:
            return Finding(rule, Status.failed, f"the DSpark draft is incomplete: "
                           f"{_summary(problems)}", "model.path")
        why = _summary(problems)
    if not adaptive:
        return Finding(rule, Status.skipped, f"heads not checked: {why}", "speculative")
    if allow:
        return Finding(rule, Status.skipped,
                       f"OVERRIDDEN by {OVERRIDE_KEY}=true: adaptive verification launches "
                       "without a verified confidence head, and vLLM will silently use its "
                       f"online estimator instead ({why})", OVERRIDE_KEY, overridden=True)
    return Finding(rule, Status.failed,
                   f"adaptive verification needs a verified confidence head ({why}); use a "
                   "checkpoint revision that ships the head, or speculative=dspark_fixed; "
                   f"{OVERRIDE_KEY}=true launches anyway, on purpose", "speculative")


def checkpoint_findings(
    model_cfg: Any, speculative_cfg: Any, checks_cfg: Any = None, dry_run: bool = False
) -> list[Finding]:
    """Findings on the local checkpoint: structure, pins, heads (fail closed for adaptive).
    A dry run plans for another machine, so a checkpoint absent here is skipped, not failed."""
    raw = _get(model_cfg, "path")
    path = Path(str(raw)).expanduser() if raw else None
    method = _get(speculative_cfg, "method")
    adaptive = _get(speculative_cfg, "enable_adaptive_verification", False) is True
    allow = bool(_get(checks_cfg, "allow_missing_confidence_head", False))
    if path is None or not path.is_dir():
        why = f"model.path {raw} is not a local directory, so it cannot be checked here"
        head = _head_finding(None, method, adaptive, allow, why)
        if dry_run and head.failed:
            head = Finding(head.rule, Status.skipped, f"{why}; a real launch refuses adaptive "
                           "verification until the head is verified", head.key)
        return [Finding("checkpoint-structure", Status.skipped, why, "model.path"), head]
    from dspark_cli.checkpoint.result import Check

    report = _verify(path, model_cfg)
    structure = report.problems_of(Check.structure)
    findings = [
        Finding("checkpoint-structure",
                Status.failed if structure else Status.passed,
                f"{path}: {_summary(structure)}" if structure
                else f"{report.num_shards} shards, {report.num_tensors:,} tensors: headers "
                     "valid and matching the index",
                "model.path")
    ]
    if Check.pins in report.checks:
        pins = report.problems_of(Check.pins)
        findings.append(
            Finding("checkpoint-pins", Status.failed if pins else Status.passed,
                    _summary(pins) if pins else "the checkpoint matches model.expected.*",
                    "model.expected")
        )
    draft = _get(speculative_cfg, "model")
    draft_path = Path(str(draft)).expanduser() if draft else path
    if draft_path == path:
        head_report = report
    elif draft_path.is_dir():
        head_report = _verify(draft_path, {})
    else:
        head_report = None
    why = f"the draft {draft} is not a local directory, so its heads cannot be checked"
    findings.append(_head_finding(head_report, method, adaptive, allow, why))
    return findings
