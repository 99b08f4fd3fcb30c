"""From a plan to something startable on this machine: the machine's checks, the model it
needs (the tiny model), the real argv and env, and the run record. Starting it is the server
session's job (`dspark_cli.server.session`)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from dspark_cli.errors import CheckFailed, UsageError
from dspark_cli.launch.checks import check, print_findings
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.machine.detect import Machine, detect
from dspark_cli.server.logscan import Pattern
from dspark_cli.server.target import Target
from dspark_cli.status import Finding


@dataclass(frozen=True)
class Prepared:
    """A checked plan, ready to start: the real argv and env, and what was found on the way."""

    argv: tuple[str, ...]
    env: dict[str, str]
    machine: Machine
    findings: tuple[Finding, ...]
    custom_command: bool  # server.command replaced the planned vLLM command

    def target(self, plan: LaunchPlan, server: DictConfig, log_path: Path,
               fatal: tuple[Pattern, ...] = (), watch: tuple[Pattern, ...] = (),
               context_lines: int = 10, metrics_timeout_s: float = 5.0) -> Target:
        """The managed server session's target for this launch, logging to `log_path`."""
        return Target(plan.base_url, plan.client_host, plan.port, log_path,
                      float(server.ready_timeout_s), float(server.stop_grace_s), self.argv,
                      self.env, fatal, watch, context_lines, metrics_timeout_s)


def child_environ() -> dict[str, str]:
    """This process's environment without the secrets dspark moved out of its overrides
    (launch/secret_overrides.py): the child gets those only under their real names."""
    from dspark_cli.launch.secret_overrides import PREFIX

    return {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}


def ensure_model(cfg: DictConfig) -> None:
    """Build the synthetic model the profile names, if it is not cached yet."""
    if cfg.model.synthetic == "tiny":
        from dspark_cli.vllm.tiny_model import build

        if not (Path(cfg.model.path) / "config.json").is_file():
            print(f"dspark: making the tiny model at {cfg.model.path}", file=sys.stderr)
        build(Path(cfg.model.path))
    elif cfg.model.synthetic is not None:
        raise UsageError(f"model.synthetic={cfg.model.synthetic!r} is unknown; use `tiny` or null")


def _argv(cfg: DictConfig, plan: LaunchPlan, ask_vllm: bool) -> tuple[tuple[str, ...],
                                                                       tuple[Finding, ...]]:
    """The argv to start (vLLM through the shim, or `server.command`) and vLLM's finding."""
    custom = cfg.server.command
    if custom is not None:
        argv = tuple(str(a) for a in custom)
        if not argv:
            raise UsageError("server.command is empty; give the argv to launch, e.g. "
                             "server.command=[my-wrapper,vllm,serve]")
        return argv, ()
    from dspark_cli.vllm.shim import vllm_command

    if not ask_vllm:
        return tuple(vllm_command(plan.argv)), ()
    from dspark_cli.launch.vllm_verdict import plan_verdict

    validation = plan_verdict(plan)
    if validation.failed:
        print_findings([validation])
        raise CheckFailed("the command did not pass vLLM's own validation; nothing was started.")
    return tuple(vllm_command(plan.argv)), (validation,)


def prepare(cfg: DictConfig, plan: LaunchPlan, record_dir: Path | None,
            ask_vllm: bool = True) -> Prepared:
    """Preflight on this machine (CheckFailed when a rule fails), the model, vLLM's validation
    and, when `record_dir` is given, the run record there. `ask_vllm=False` leaves vLLM's
    validation to the caller (`smoke` runs it beside the boot)."""
    machine = detect()
    findings = check(cfg, plan, machine, ask_vllm=False)
    print_findings(findings)
    if any(f.failed for f in findings):
        raise CheckFailed("preflight failed; nothing was started (details above).")
    ensure_model(cfg)
    argv, validation = _argv(cfg, plan, ask_vllm)
    prepared = Prepared(argv, {**child_environ(), **plan.env_map}, machine,
                        findings + validation, cfg.server.command is not None)
    if record_dir is not None:
        write(prepared, cfg, plan, record_dir)
    return prepared


def write(prepared: Prepared, cfg: DictConfig, plan: LaunchPlan, directory: Path) -> None:
    """The run record of a prepared launch, with the explicit overrides as notes."""
    from dspark_cli.launch.provenance import collect
    from dspark_cli.launch.record import write_record

    notes = ([f"server.command replaces the planned argv: {list(prepared.argv)}"]
             if prepared.custom_command else [])
    notes += [f"{f.rule}: {f.message}" for f in prepared.findings if f.overridden]
    write_record(directory, cfg, plan, list(prepared.argv),
                 collect(plan.model_path, prepared.machine), notes)
