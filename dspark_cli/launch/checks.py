"""Every check before a boot, in one call: the plan's and the machine's rules, the local
checkpoint (structure, pins, DSpark heads) and, when asked, vLLM's own validation; and how
their findings are reported."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from dspark_cli.errors import ExitCode
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.rules import Context, run_rules
from dspark_cli.status import Finding, Status

if TYPE_CHECKING:  # detection (subprocess, sysfs) is not needed to plan
    from dspark_cli.config.schema import LaunchConf
    from dspark_cli.machine.detect import Machine


def check(cfg: LaunchConf, plan: LaunchPlan, machine: Machine | None,
          ask_vllm: bool) -> tuple[Finding, ...]:
    """All preflight findings; machine rules are skipped without a machine (a dry run)."""
    from dspark_cli.config.typed import plain
    from dspark_cli.launch import runtime_pins
    from dspark_cli.launch.checkpoint_findings import checkpoint_findings
    from dspark_cli.launch.model_family import check_family

    check_family(cfg.model)  # the checkpoint's config.json decides the family
    ctx = Context(plan, machine)
    findings = list(run_rules(ctx))
    # The rendered speculative config decides whether the confidence head is needed.
    findings += checkpoint_findings(cfg.model, ctx.launch.speculative, cfg.checks,
                                    dry_run=machine is None)
    findings.append(runtime_pins.finding(plain(cfg.runtime.expected), dry_run=machine is None,
                                         reference=cfg.runtime.reference))
    if ask_vllm:
        from dspark_cli.launch.vllm_verdict import plan_verdict

        findings.append(plan_verdict(plan, cfg.server.validate_timeout_s))
    return tuple(findings)


def print_findings(findings: Iterable[Finding], label: str = "") -> None:
    """To stderr: each failure and each check switched off on purpose on a line of its own (a
    failure names the key to change); the checks that could not run here (a dry run) named on
    one line, each with its reason under `-v`; checks that do not apply, only under `-v`."""
    from dspark_cli.console import verbose

    findings = list(findings)
    tag = f"[{label}] " if label else ""
    for f in findings:
        if f.status is Status.failed:
            change = f" (change `{f.key}`)" if f.key else ""
            print(f"dspark: preflight {tag}{f.rule} FAILED: {f.message}{change}",
                  file=sys.stderr)
    skipped = [f for f in findings if f.status is Status.skipped]
    for f in skipped:
        if f.overridden or (verbose() and f.applies):
            print(f"dspark: preflight {tag}{f.rule} skipped: {f.message}", file=sys.stderr)
        elif verbose():
            print(f"dspark: preflight {tag}{f.rule} does not apply: {f.message}",
                  file=sys.stderr)
    unchecked = list(dict.fromkeys(f.rule for f in skipped if f.applies and not f.overridden))
    if unchecked and not verbose():
        print(f"dspark: preflight {tag}did not check {', '.join(unchecked)} "
              "(-v says why for each)", file=sys.stderr)
    for note in dict.fromkeys(f.note for f in findings if f.note):
        print(f"dspark: note: {note}", file=sys.stderr)


def exit_code(findings: Iterable[Finding]) -> int:
    return int(ExitCode.CHECK_FAILED if any(f.failed for f in findings) else ExitCode.OK)
