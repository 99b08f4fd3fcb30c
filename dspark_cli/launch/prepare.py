"""What a start on this machine needs from a plan: the machine's checks, the model it needs (the
tiny model), the argv that really runs and the environment it gets, and the run record's notes.
The start step (`deploy/start.py`) puts them together; starting is a deployment's job."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from dspark_cli.errors import CheckFailed, UsageError
from dspark_cli.launch.checks import check, print_findings
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.machine.detect import Machine, detect
from dspark_cli.status import Finding

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


def child_environ() -> dict[str, str]:
    """This process's environment without the secrets dspark moved out of its overrides
    (launch/secret_overrides.py): the child gets those only under their real names."""
    from dspark_cli.launch.secret_overrides import PREFIX

    return {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}


def ensure_model(cfg: LaunchConf) -> None:
    """Build the synthetic model the profile names, if it is not cached yet."""
    if cfg.model.synthetic == "tiny":
        from dspark_cli.vllm.tiny_model import build

        if not (Path(cfg.model.path) / "config.json").is_file():
            print(f"dspark: making the tiny model at {cfg.model.path}", file=sys.stderr)
        build(Path(cfg.model.path))
    elif cfg.model.synthetic == "tiny_qwen3":
        from dspark_cli.vllm.tiny_model import build_qwen3_dspark

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
    from dspark_cli.vllm.shim import vllm_command

    return tuple(vllm_command(plan.argv))


def machine_checks(cfg: LaunchConf, plan: LaunchPlan) -> tuple[Machine, tuple[Finding, ...]]:
    """This machine and the preflight on it, printed; CheckFailed when a rule fails."""
    machine = detect()
    findings = check(cfg, plan, machine, ask_vllm=False)
    print_findings(findings)
    if any(f.failed for f in findings):
        raise CheckFailed("preflight failed; nothing was started (details above).")
    return machine, findings


def record_notes(argv: Iterable[str], custom: bool,
                 findings: Iterable[Finding]) -> list[str]:
    """The run record's notes: the explicit overrides (a command of one's own, a check
    switched off on purpose), from the findings' fields, never their text."""
    notes = [f"server.command replaces the planned argv: {list(argv)}"] if custom else []
    return notes + [f"{f.rule}: {f.message}" for f in findings if f.overridden]
