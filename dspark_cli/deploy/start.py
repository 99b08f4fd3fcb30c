"""The one start step, plan -> deployment, for `serve`, `smoke`, `bench` and `validate`, and
the registry of deploy targets it starts on (`deploy_target`: the one place `deploy.target` is
looked up; `target.py` says what an entry is).

`ready()` does what every start needs once, before anything boots: the deploy target's entry, a
command of its own refused where it cannot run, the preflight (on this machine, or the rules
that need none when the cluster's machine runs it), then the port checked, the model (the tiny
one built when the profile names it), vLLM's own validation by one policy (`vllm_check`), the
argv that really runs and its environment, and the run record. The `Ready` it returns makes a
fresh `Deployment` per start (`serve` and `smoke` one, `bench` one per cell). A dry run's
preflight (`dry_preflight`) prints the same findings for the same plan wherever it would run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dspark_cli.compat import StrEnum
from dspark_cli.deploy import local
from dspark_cli.deploy.k8s import target as k8s
from dspark_cli.deploy.slurm import target as slurm
from dspark_cli.deploy.target import DeployTarget, Launch
from dspark_cli.errors import CheckFailed, UsageError
from dspark_cli.launch import checks
from dspark_cli.launch.checks import LOCAL_HEAD, ask_together, node_verdicts, plan_verdict
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.record import collect, write_record
from dspark_cli.launch.render import layout_script
from dspark_cli.launch.rules import checked_plan, layout_findings
from dspark_cli.launch.secrets import PREFIX
from dspark_cli.machine.detect import Machine, detect
from dspark_cli.paths import NODES_SH
from dspark_cli.server.deployment import AttachedServer, Deployment
from dspark_cli.server.process import ensure_port_free
from dspark_cli.status import Finding
from dspark_cli.vllm.accepts import Verdicts
from dspark_cli.vllm.shim import vllm_command
from dspark_cli.vllm.tiny_model import build, build_qwen3_dspark

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


TARGETS: dict[str, DeployTarget] = {
    t.name: t for t in (local.TARGET, slurm.TARGET, k8s.TARGET)}


def deploy_target(cfg: LaunchConf) -> DeployTarget:
    """The entry `deploy.target` names; UsageError naming the known ones otherwise."""
    name = str(cfg.deploy.target)
    if name not in TARGETS:
        known = ", ".join(f"deploy={n}" for n in TARGETS)
        raise UsageError(f"deploy.target={name!r} is not a deploy target here; use {known}")
    return TARGETS[name]


@dataclass(frozen=True)
class DryLaunch:
    """One launch planned for a dry run: the checked plan, the deploy target that would run it,
    and what the preflight that needs no machine found."""

    plan: LaunchPlan
    target: DeployTarget
    findings: tuple[Finding, ...]


def dry_launch(cfg: LaunchConf, validate: bool = False) -> DryLaunch:
    """The one dry-run sequence of serve, smoke, bench's arms and validate: the plan (its node
    layout refused when broken), its deploy target, the preflight that needs no machine."""
    plan = checked_plan(cfg)
    target = deploy_target(cfg)
    return DryLaunch(plan, target, dry_preflight(cfg, plan, target, validate))


def dry_preflight(cfg: LaunchConf, plan: LaunchPlan, target: DeployTarget,
                  validate: bool = False) -> tuple[Finding, ...]:
    """What a dry run checks wherever the plan would run: the rules that need no machine, the
    node layout's and the target's own (the k8s image pinned); vLLM's verdict on every node's
    command when asked (`--validate`)."""
    found = (*checks.check(cfg, plan, machine=None),
             *layout_findings(plan), *target.findings(cfg))
    return (*found, *node_verdicts(plan, cfg.server.validate_timeout_s)) if validate else found


class VllmCheck(StrEnum):
    """When vLLM's own validation of the commands runs."""

    before = "before"  # before anything starts: a rejection stops the start
    beside = "beside"  # beside the boot (a smoke of one node): a rejection ends the wait


def vllm_check(target: DeployTarget, custom: bool, nodes: int, *, asked: bool = False,
               beside: bool = False) -> VllmCheck | None:
    """The one policy. A command of one's own is not vLLM's to judge; a cluster target's
    commands run on the cluster's vLLM, so this host's judges them only when `asked`
    (`serve --validate`); several nodes are judged before they boot (beside several booting
    nodes, on a small machine, the validator can starve past its timeout); one node beside its
    boot when the caller can wait for both (`beside`), else before."""
    if custom or not (target.here or asked):
        return None
    return VllmCheck.beside if beside and target.here and nodes == 1 else VllmCheck.before


def ask_vllm_together(starts: Sequence[tuple[LaunchConf, LaunchPlan]], asked: Verdicts) -> None:
    """Those of `starts` that `ready()` judges before they start are judged together (a bench's
    arms: one vLLM import, not one per arm), when the first `ready(..., asked=asked)` asks,
    after its preflight and with its model there."""
    ask_together([plan for cfg, plan in starts
                  if vllm_check(deploy_target(cfg), cfg.server.command is not None,
                                plan.layout.nodes) is VllmCheck.before], asked)


@dataclass(frozen=True)
class Ready:
    """A plan checked and recorded for its target; `deployment(dir)` is a fresh start of it."""

    target: DeployTarget
    launch: Launch
    machine: Machine | None  # this machine, when the nodes run here
    verdict: tuple[Finding, ...]  # vLLM's, taken before the start (empty: not taken)
    beside: Callable[[], Finding] | None  # vLLM's, to take beside the boot
    load_env: Mapping[str, str]  # the load generator's environment (bench)

    @property
    def head_argv(self) -> tuple[str, ...]:
        """The head's command as it runs, for the records."""
        if self.target.here and self.launch.plan.layout.nodes > 1:
            return tuple(vllm_command(self.launch.plan.layout.head.resolved(LOCAL_HEAD)))
        return self.launch.argv

    def deployment(self, directory: Path, env: Mapping[str, str] | None = None) -> Deployment:
        """A fresh start, its files in `directory`; `env` over the launch's (a bench boot's
        cache directories)."""
        launch = replace(self.launch, env={**self.launch.env, **env}) if env else self.launch
        return self.target.deployment(launch, directory)


def _refuse_custom(cfg: LaunchConf, target: DeployTarget, nodes: int) -> None:
    if cfg.server.command is None:
        return
    if not target.here:
        raise UsageError(f"server.command replaces the command dspark starts on this host, but "
                         f"deploy={target.name} runs the plan's node commands on the cluster; "
                         "drop server.command, or use deploy=local.")
    if nodes > 1:
        raise UsageError(f"server.command replaces one command, but hw.nodes={nodes} "
                         "runs one per node; drop server.command or set hw.nodes=1.")


def _require(found: tuple[Finding, ...], what: str) -> None:
    checks.print_findings(found)
    if any(f.failed for f in found):
        raise CheckFailed(f"{what}; nothing was started.")


def ready(cfg: LaunchConf, plan: LaunchPlan, record_dir: Path, *,
          check_port: bool = True, asked: bool = False, beside: bool = False,
          verdicts: Verdicts | None = None) -> Ready:
    """Check `plan` for where `deploy.target` runs it and write its run record into
    `record_dir`; CheckFailed/UsageError/ServerError before anything starts. `check_port`:
    refuse a busy port after the preflight (which needs none) and before anything is written;
    `asked`/`beside`: see `vllm_check`; `verdicts`: vLLM's answers the command already has
    (None: asked afresh)."""
    layout = plan.layout
    target = deploy_target(cfg)
    target.require()  # before anything is written
    _refuse_custom(cfg, target, layout.nodes)
    machine = None
    if target.here:
        # The preflight first: on the wrong machine that is the answer, whatever holds the port.
        machine, found = machine_checks(cfg, plan)
        if check_port:
            ensure_port_free(plan.client_host, plan.port)
    else:
        found = (*checks.check(cfg, plan, machine=None), *target.findings(cfg))
        checks.print_findings(found)
        if any(f.failed for f in found):
            raise CheckFailed("preflight failed; nothing was submitted (details above).")
    ensure_model(cfg)
    when = vllm_check(target, cfg.server.command is not None, layout.nodes, asked=asked,
                      beside=beside)
    verdict = (node_verdicts(plan, cfg.server.validate_timeout_s, verdicts)
               if when is VllmCheck.before else ())
    if verdict:
        _require(verdict, "a node's command did not pass vLLM's own validation"
                 if layout.nodes > 1 else "the command did not pass vLLM's own validation")
    argv = launch_argv(cfg, plan)
    env = {**child_environ(), **plan.env_map}
    notes = record_notes(argv, cfg.server.command is not None, found)
    if not target.here:
        notes.append(f"deploy={target.name}: the cluster engine runs every node's command (the "
                     "job script of each start; nodes.sh for several nodes)")
    write_record(record_dir, cfg, plan, list(argv), collect(plan.model_path, machine), notes)
    if layout.nodes > 1:
        (record_dir / NODES_SH).write_text(layout_script(layout))
    return Ready(target, Launch(cfg, plan, argv, env), machine, verdict,
                 (lambda: plan_verdict(plan, cfg.server.validate_timeout_s, verdicts))
                 if when is VllmCheck.beside else None,
                 env if target.here else child_environ())


def attach(cfg: LaunchConf, plan: LaunchPlan) -> AttachedServer:
    """The running server `server.url` names, its log `server.log` when given."""
    log = Path(cfg.server.log) if cfg.server.log else None
    if log is not None and not log.is_file():
        raise UsageError(f"server.log={log} is not a file; give the attached server's log, "
                         "or leave server.log unset to skip the log checks.")
    return AttachedServer(plan.base_url, log)


# -- what a start on this machine needs from a plan ------------------------------------------
def child_environ() -> dict[str, str]:
    """This process's environment without the secrets dspark moved out of its overrides
    (launch/secrets.py): the child gets those only under their real names."""
    return {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}


def ensure_model(cfg: LaunchConf) -> None:
    """Build the synthetic model the profile names, if it is not cached yet."""
    if cfg.model.synthetic == "tiny":
        if not (Path(cfg.model.path) / "config.json").is_file():
            print(f"dspark: making the tiny model at {cfg.model.path}", file=sys.stderr)
        build(Path(cfg.model.path))
    elif cfg.model.synthetic == "tiny_qwen3":
        if cfg.model.draft is None:
            raise UsageError("model.synthetic=tiny_qwen3 makes a target and its DSpark draft: "
                             "set model.draft to the draft's directory.")
        if not all((Path(p) / "config.json").is_file() for p in (cfg.model.path,
                                                                  cfg.model.draft)):
            print(f"dspark: making the tiny Qwen3 pair at {cfg.model.path} and "
                  f"{cfg.model.draft}", file=sys.stderr)
        build_qwen3_dspark(Path(cfg.model.path), Path(cfg.model.draft))
    elif cfg.model.synthetic is not None:
        raise UsageError(f"model.synthetic={cfg.model.synthetic!r} is unknown; use `tiny`, "
                         "`tiny_qwen3` or null")


def launch_argv(cfg: LaunchConf, plan: LaunchPlan) -> tuple[str, ...]:
    """The argv to start: `server.command`, or the plan's vLLM through the shim."""
    custom = cfg.server.command
    if custom is not None:
        argv = tuple(str(a) for a in custom)
        if not argv:
            raise UsageError("server.command is empty; give the argv to launch, e.g. "
                             "server.command=[my-wrapper,vllm,serve]")
        return argv
    return tuple(vllm_command(plan.argv))


def machine_checks(cfg: LaunchConf, plan: LaunchPlan) -> tuple[Machine, tuple[Finding, ...]]:
    """This machine and the preflight on it, printed; CheckFailed when a rule fails."""
    machine = detect()
    findings = checks.check(cfg, plan, machine)
    checks.print_findings(findings)
    if any(f.failed for f in findings):
        raise CheckFailed("preflight failed; nothing was started (details above).")
    return machine, findings


def record_notes(argv: Iterable[str], custom: bool,
                 findings: Iterable[Finding]) -> list[str]:
    """The run record's notes: the explicit overrides (a command of one's own, a check
    switched off on purpose), from the findings' fields, never their text."""
    notes = [f"server.command replaces the planned argv: {list(argv)}"] if custom else []
    return notes + [f"{f.rule}: {f.message}" for f in findings if f.overridden]
