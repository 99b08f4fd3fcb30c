"""Every check before a boot, in one call: the plan's and the machine's rules (`rules.py`), the
local checkpoint and, when asked, vLLM's own validation; and how their findings are reported.

The checkpoint, when model.path is a local directory: its config.json decides the model family,
not the model option's name (`check_family`: `model=local` on a DeepSeek-V4 checkpoint would
drop the family's flags and rules, a family option on another architecture would force them;
both are refused, naming the option to use; config.json is read as untrusted input: bounded in
size, a regular file, a JSON object with fields of the right types); then the structural pass,
the pins and the DSpark head check, seconds before a long boot. Adaptive verification without a
verified confidence head is refused (vLLM would silently fall back to an online estimator;
vLLM 0.28 refuses a Qwen3 DSpark draft without one at boot, after loading both models) unless
`checks.allow_missing_confidence_head=true` says so on purpose; the finding is then marked
`overridden`, reported and recorded, not hidden.

vLLM's own verdict (`vllm/accepts.py` asks vLLM in a subprocess): on the plan's command, or on
every node's command with the head's address resolved.
"""

from __future__ import annotations

import stat
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.checkpoint.result import Check, CheckpointResult, Problem
from dspark_cli.checkpoint.structure import CONFIG_NAME, ParseError, parse_config
from dspark_cli.checkpoint.verify import verify_checkpoint
from dspark_cli.console import verbose
from dspark_cli.errors import ExitCode, UsageError
from dspark_cli.launch import runtime
from dspark_cli.launch.layout import NodeLayout
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.rules import Context, run_rules
from dspark_cli.status import Finding, Status
from dspark_cli.vllm.accepts import Verdicts, vllm_accepts_command, vllm_accepts_commands

if TYPE_CHECKING:  # detection (subprocess, sysfs) loads when used
    from dspark_cli.config.schema import ChecksConf, LaunchConf, ModelConf
    from dspark_cli.machine.detect import Machine


def check(cfg: LaunchConf, plan: LaunchPlan, machine: Machine | None) -> tuple[Finding, ...]:
    """All preflight findings; machine rules are skipped without a machine (a dry run). vLLM's
    own verdict is not among them: the start step takes it (`deploy/start.py`), once per
    command and beside the boot where it can."""
    check_family(cfg.model)  # the checkpoint's config.json decides the family
    ctx = Context(plan, machine)
    findings = list(run_rules(ctx))
    # The rendered speculative config decides whether the confidence head is needed.
    findings += checkpoint_findings(cfg.model, ctx.launch.speculative, cfg.checks,
                                    dry_run=machine is None)
    findings.append(runtime.finding(cfg.runtime.expected, dry_run=machine is None,
                                    reference=cfg.runtime.reference))
    return tuple(findings)


def print_findings(findings: Iterable[Finding], label: str = "") -> None:
    """To stderr: each failure and each check switched off on purpose on a line of its own (a
    failure names the key to change); the checks that could not run here (a dry run) named on
    one line, each with its reason under `-v`; checks that do not apply, only under `-v`."""
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


# -- the local checkpoint -------------------------------------------------------------------
OVERRIDE_KEY = "checks.allow_missing_confidence_head"
_SHOWN = 3  # problems quoted in one finding; `dspark verify-checkpoint` lists them all
# Head problems that only matter to adaptive verification (fixed-K DSpark runs without it).
_CONFIDENCE_ONLY = frozenset({
    "confidence-head-disabled", "confidence-head-missing", "confidence-head-shape",
    "confidence-head-dtype", "confidence-head-not-finite",
})


def _summary(problems: tuple[Problem, ...] | list[Problem]) -> str:
    shown = "; ".join(f"{p.subject}: expected {p.expected}, found {p.actual}"
                      for p in problems[:_SHOWN])
    more = len(problems) - _SHOWN
    return shown + (f"; and {more} more" if more > 0 else "")


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
        problems = [p for p in report.problems_of(Check.head)
                    if adaptive or p.code not in _CONFIDENCE_ONLY]
        if not problems and (report.confidence_head or not adaptive):
            return Finding(rule, Status.passed, "the DSpark heads are present and valid",
                           "speculative")
        if not adaptive:
            return Finding(rule, Status.failed, f"the DSpark draft is incomplete: "
                           f"{_summary(problems)}", "model.path")
        # A Qwen3 DSpark draft gets a confidence head only when its config.json asks for one.
        why = _summary(problems) or (f"{report.path}/config.json does not declare one "
                                     "(enable_confidence_head is not true)")
    if not adaptive:
        return Finding(rule, Status.skipped, f"heads not checked: {why}", "speculative")
    if allow:
        return Finding(rule, Status.skipped,
                       f"OVERRIDDEN by {OVERRIDE_KEY}=true: adaptive verification launches "
                       "without a verified confidence head, and vLLM will silently use its "
                       "online estimator instead (vLLM 0.28 refuses a Qwen3 DSpark draft "
                       f"without one at boot) ({why})", OVERRIDE_KEY, overridden=True)
    return Finding(rule, Status.failed,
                   f"adaptive verification needs a verified confidence head ({why}); use a "
                   "checkpoint revision that ships the head, or speculative=dspark_fixed; "
                   f"{OVERRIDE_KEY}=true launches anyway, on purpose", "speculative")


def checkpoint_findings(
    model: ModelConf, speculative: Mapping[str, Any], checks: ChecksConf, dry_run: bool = False
) -> list[Finding]:
    """Findings on the local checkpoint: structure, pins, heads (fail closed for adaptive).
    `speculative` is the rendered `--speculative-config` ({} for none): what vLLM runs decides
    whether a head is needed. A dry run plans for another machine, so a checkpoint absent here
    is skipped, not failed."""
    raw = model.path
    path = Path(str(raw)).expanduser() if raw else None
    method = speculative.get("method")
    adaptive = speculative.get("enable_adaptive_verification") is True
    allow = checks.allow_missing_confidence_head
    if path is None or not path.is_dir():
        why = f"model.path {raw} is not a local directory, so it cannot be checked here"
        head = _head_finding(None, method, adaptive, allow, why)
        if dry_run and head.failed:
            head = Finding(head.rule, Status.skipped, f"{why}; a real launch refuses adaptive "
                           "verification until the head is verified", head.key)
        return [Finding("checkpoint-structure", Status.skipped, why, "model.path"), head]
    report = verify_checkpoint(path, model.expected)
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
    draft = speculative.get("model")
    draft_path = Path(str(draft)).expanduser() if draft else path
    if draft_path == path:
        head_report = report
    elif draft_path.is_dir():
        head_report = verify_checkpoint(draft_path)
    else:
        head_report = None
    why = f"the draft {draft} is not a local directory, so its heads cannot be checked"
    findings.append(_head_finding(head_report, method, adaptive, allow, why))
    return findings


MAX_CONFIG_BYTES = 8 << 20  # a model's config.json is kilobytes; no legitimate one comes close


@dataclass(frozen=True)
class Family:
    architectures: tuple[str, ...]
    model_types: tuple[str, ...]
    option: str  # the model option that serves any checkpoint of the family


FAMILIES = {
    "deepseek_v4": Family(("DeepseekV4ForCausalLM",), ("deepseek_v4",), "deepseek_v4_local"),
}


@dataclass(frozen=True)
class Declared:
    """What a checkpoint's config.json says it is."""

    architectures: tuple[str, ...]
    model_type: str | None

    @property
    def family(self) -> str | None:
        return next((name for name, f in FAMILIES.items()
                     if set(self.architectures) & set(f.architectures)
                     or self.model_type in f.model_types), None)

    def __str__(self) -> str:
        shown = ", ".join(self.architectures) or (self.model_type and f"model_type "
                                                  f"{self.model_type}")
        return shown or "no architecture"


def _bad(path: Path, why: str) -> UsageError:
    return UsageError(f"{path}: {why}; model.path must be a checkpoint directory whose "
                      f"{path.name} is the model's (a JSON object naming its architectures).")


def read_declared(root: Path) -> Declared | None:
    """What `root/config.json` declares; None when there is none (the structural check
    reports a missing file). UsageError for a file that cannot be a model's config."""
    path = root / CONFIG_NAME
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    except OSError as e:  # a symlink loop, a permission problem
        raise _bad(path, f"cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(info.st_mode):
        raise _bad(path, "is not a regular file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise _bad(path, f"is {info.st_size:,} bytes, more than any model config "
                         f"({MAX_CONFIG_BYTES >> 20} MiB)")
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:  # it grew since stat
            raise _bad(path, f"is more than any model config ({MAX_CONFIG_BYTES >> 20} MiB)")
        config = parse_config(raw)
    except OSError as e:
        raise _bad(path, f"cannot be read ({e.strerror or e})") from None
    except ParseError as e:
        raise _bad(path, str(e)) from None
    return Declared(_architectures(path, config), _model_type(path, config))


def _architectures(path: Path, config: dict[str, Any]) -> tuple[str, ...]:
    value = config.get("architectures")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise _bad(path, f"`architectures` must be a list of names, not {_shown(value)}")
    return tuple(value)


def _model_type(path: Path, config: dict[str, Any]) -> str | None:
    value = config.get("model_type")
    if value is not None and not isinstance(value, str):
        raise _bad(path, f"`model_type` must be a name, not {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def check_family(model: ModelConf) -> None:
    """Refuse a model option whose family is not the local checkpoint's (UsageError, exit 2).
    A path that is not a local directory (a hub id, another machine's path) is not read."""
    raw = model.path
    root = Path(str(raw)).expanduser() if raw else None
    if root is None or not root.is_dir():
        return
    declared = read_declared(root)
    if declared is None:
        return
    actual, chosen = declared.family, model.family
    if actual == chosen:
        return
    name = model.name
    if actual is not None:
        raise UsageError(
            f"{root}/{CONFIG_NAME} declares {declared} (the {actual} family), but model={name} "
            "serves it without that family's flags and rules (fp8 KV cache, trust-remote-code, "
            f"its parsers); use model={FAMILIES[actual].option} model.path={root}")
    raise UsageError(
        f"model={name} is for {chosen} checkpoints, but {root}/{CONFIG_NAME} declares "
        f"{declared}; use model=local model.path={root}")


# -- vLLM's own verdict ---------------------------------------------------------------------
LOCAL_HEAD = "127.0.0.1"  # where a layout's head is when nothing else says


def plan_verdict(plan: LaunchPlan, timeout_s: float, asked: Verdicts | None = None) -> Finding:
    """A finding: vLLM accepts the command, or why not (not installed, rejected, no answer
    within `timeout_s`); `asked`: the command's answers so far."""
    return vllm_accepts_command(plan.argv, plan.env_map, timeout_s=timeout_s, asked=asked)


def layout_verdict(layout: NodeLayout, timeout_s: float, head_addr: str = LOCAL_HEAD,
                   asked: Verdicts | None = None) -> tuple[Finding, ...]:
    """vLLM's verdict on every node's command, the head's address placeholder resolved; one
    subprocess when the nodes share their environment (they do when planned from one config)."""
    labels = [f"node {node.rank}: " for node in layout.launches]
    argvs = [node.resolved(head_addr) for node in layout.launches]
    envs = [dict(node.env) for node in layout.launches]
    if all(e == envs[0] for e in envs):
        return vllm_accepts_commands(argvs, envs[0], labels, timeout_s, asked)
    return tuple(vllm_accepts_command(a, e, label, timeout_s, asked)
                 for a, e, label in zip(argvs, envs, labels, strict=True))


def _commands(plan: LaunchPlan) -> list[tuple[list[str], dict[str, str]]]:
    """What `node_verdicts` asks about: every node's command and env (one node: the plan's)."""
    if plan.layout.nodes > 1:
        return [(list(node.resolved(LOCAL_HEAD)), dict(node.env)) for node in plan.layout.launches]
    return [(list(plan.argv), dict(plan.env_map))]


def ask_together(plans: Sequence[LaunchPlan], asked: Verdicts) -> None:
    """Have vLLM asked about every plan's commands with the first of them that `node_verdicts`
    asks about with `asked`, in one vLLM import per environment (a bench's arms); the
    `node_verdicts` that follow find their answers in `asked`."""
    for plan in plans:
        for argv, env in _commands(plan):
            asked.take_along([argv], env)


def node_verdicts(plan: LaunchPlan, timeout_s: float,
                  asked: Verdicts | None = None) -> tuple[Finding, ...]:
    """vLLM's verdict on every node's command (one node: the plan's); `asked`: the command's
    answers so far (None: ask afresh)."""
    return (layout_verdict(plan.layout, timeout_s, LOCAL_HEAD, asked) if plan.layout.nodes > 1
            else (plan_verdict(plan, timeout_s, asked),))
