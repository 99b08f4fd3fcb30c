"""The side-effect edge shared by `serve`, `smoke` and `bench`: check a plan on this machine,
make what it needs (the tiny model), write the run record, and start the server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from dspark_cli.errors import CheckFailed, ExitCode, ServerError, UsageError
from dspark_cli.launch import rules as preflight
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.rules import Context, Finding, Status
from dspark_cli.machine.detect import Machine, detect

if TYPE_CHECKING:
    from dspark_cli.server.process import ServerProcess

VALIDATE_TIMEOUT_S = 120.0


def validate_with_vllm(plan: LaunchPlan) -> Finding:
    """Parse the command with the installed vLLM's own parser (and build its engine config when
    the checkpoint's config.json is local), in a subprocess: seconds, not a weight load."""
    from dspark_cli.vllm.shim import installed_vllm

    rule, key = "vllm-accepts-command", "serving.extra_args"
    if installed_vllm() is None:
        return Finding(rule, Status.failed, "vLLM is not installed here, so the command can "
                       "neither be validated nor run (on CPU: pip install 'dspark[cpu]')", None)
    env = {**os.environ, **plan.env_map}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dspark_cli.vllm.parser_check"], input=json.dumps(
                list(plan.argv[2:])), capture_output=True, text=True, env=env,
            timeout=VALIDATE_TIMEOUT_S)
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as e:
        return Finding(rule, Status.failed, f"vLLM's validator did not answer ({e})", key)
    if not result["ok"]:
        return Finding(rule, Status.failed,
                       f"vLLM rejects the command at {result['stage']}: {result['error']}", key)
    note = f" ({result['error']})" if result.get("error") else ""
    return Finding(rule, Status.passed, f"vLLM accepts the command ({result['stage']}){note}",
                   key)


def check(cfg: DictConfig, plan: LaunchPlan, machine: Machine | None,
          validate: bool) -> tuple[Finding, ...]:
    """All preflight findings: plan rules, machine rules (skipped without a machine), the
    local checkpoint (structure, pins, DSpark heads) and, when asked, vLLM's own validation."""
    from dspark_cli.launch.checkpoint_findings import checkpoint_findings

    findings = list(preflight.run_rules(Context(cfg, plan, machine)))
    findings += checkpoint_findings(cfg.model, cfg.speculative, cfg.checks,
                                    dry_run=machine is None)
    if validate:
        findings.append(validate_with_vllm(plan))
    return tuple(findings)


def report(findings: Iterable[Finding]) -> None:
    """Failures and skips to stderr, one line each; a failure names the config key to change."""
    findings = list(findings)
    for f in findings:
        if f.status is Status.failed:
            change = f" (change `{f.key}`)" if f.key else ""
            print(f"dspark: preflight {f.rule} FAILED: {f.message}{change}", file=sys.stderr)
    for f in findings:
        if f.status is Status.skipped:
            print(f"dspark: preflight {f.rule} skipped: {f.message}", file=sys.stderr)


def exit_code(findings: Iterable[Finding]) -> int:
    return int(ExitCode.CHECK_FAILED if any(f.failed for f in findings) else ExitCode.OK)


def ensure_model(cfg: DictConfig) -> None:
    """Build the synthetic model the profile names, if it is not cached yet."""
    if cfg.model.synthetic == "tiny":
        from dspark_cli.vllm.tiny_model import build

        if not (Path(cfg.model.path) / "config.json").is_file():
            print(f"dspark: making the tiny model at {cfg.model.path}", file=sys.stderr)
        build(Path(cfg.model.path))
    elif cfg.model.synthetic is not None:
        raise UsageError(f"model.synthetic={cfg.model.synthetic!r} is unknown; use `tiny` or null")


@dataclass(frozen=True)
class Prepared:
    """A checked plan, ready to start: the real argv and env, and where its record lives."""

    argv: list[str]
    env: dict[str, str]
    scratch: Path
    run_dir: Path
    machine: Machine
    findings: tuple[Finding, ...]


def prepare(cfg: DictConfig, plan: LaunchPlan, run_dir: Path,
            validate: bool = True) -> Prepared:
    """Preflight on this machine (raising CheckFailed), then the model, the vLLM validation and
    the run record. `server.command` replaces the argv (and skips vLLM's validation).
    `validate=False` leaves the validation to the caller (`smoke` runs it beside the boot)."""
    from dspark_cli.launch.provenance import collect
    from dspark_cli.launch.record import write_record

    machine = detect()
    findings = check(cfg, plan, machine, validate=False)
    report(findings)
    if any(f.failed for f in findings):
        raise CheckFailed("preflight failed; nothing was started (details above).")
    ensure_model(cfg)
    custom = cfg.server.command
    if custom is None and not validate:
        from dspark_cli.vllm.shim import vllm_command

        argv = vllm_command(plan.argv)
    elif custom is None:
        validation = validate_with_vllm(plan)
        findings += (validation,)
        if validation.failed:
            report([validation])
            raise CheckFailed("the command did not pass vLLM's own validation; nothing was "
                              "started.")
        from dspark_cli.vllm.shim import vllm_command

        argv = vllm_command(plan.argv)
    else:
        argv = [str(a) for a in custom]
        if not argv:
            raise UsageError("server.command is empty; give the argv to launch, e.g. "
                             "server.command=[my-wrapper,vllm,serve]")
    # A private TMPDIR per launch (vLLM leaves sockets and vllm_dist_* files there); short,
    # because ZeroMQ's IPC socket paths must fit in 107 bytes. The server removes it.
    scratch = Path(tempfile.mkdtemp(prefix="dspark-"))
    env = {**os.environ, **plan.env_map, "TMPDIR": str(scratch)}
    notes = [f"server.command replaces the planned argv: {argv}"] if custom is not None else []
    notes += [f"{f.rule}: {f.message}" for f in findings if f.message.startswith("OVERRIDDEN")]
    write_record(run_dir, cfg, plan, argv, collect(plan.model_path, machine), notes)
    return Prepared(argv, env, scratch, run_dir, machine, findings)


def client_host(plan: LaunchPlan) -> str:
    """Where a local client reaches the planned server."""
    return "127.0.0.1" if plan.host in (None, "", "0.0.0.0", "::") else plan.host


def server_for(plan: LaunchPlan, prepared: Prepared) -> ServerProcess:
    """The server process for a prepared plan (not started yet)."""
    from dspark_cli.server.process import ServerProcess

    return ServerProcess(prepared.argv, prepared.env, prepared.run_dir / "server.log",
                         plan.base_url, client_host(plan), plan.port, scratch=prepared.scratch)


def serve_foreground(cfg: DictConfig, plan: LaunchPlan) -> int:
    """Run the server until it exits or we are told to stop; forward SIGINT/SIGTERM to its
    process group and leave no process behind."""
    from dspark_cli.launch.record import run_dir
    from dspark_cli.server.process import port_in_use

    if port_in_use(client_host(plan), plan.port):
        raise ServerError(f"port {plan.port} on {client_host(plan)} is already in use; choose "
                          "another with server.port=<port>.")
    prepared = prepare(cfg, plan, run_dir())
    server = server_for(plan, prepared)
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        server.signal_group(signal.SIGKILL if len(received) > 1 else signum)

    print(f"dspark: run directory {prepared.run_dir}", file=sys.stderr)
    server.add_listener(lambda line: print(line, file=sys.stderr, flush=True))
    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.start()
        try:
            boot = server.wait_healthy(float(cfg.server.ready_timeout_s),
                                       abort=lambda: "interrupted" if received else None)
            print(f"dspark: ready at {plan.base_url} after {boot:.1f} s; Ctrl-C stops it",
                  file=sys.stderr, flush=True)
        except ServerError:
            if received:
                return int(ExitCode.INTERRUPTED)
            raise
        code = server.wait()
    finally:
        teardown = server.stop(float(cfg.server.stop_grace_s))
        for s, handler in previous.items():
            signal.signal(s, handler)
    if teardown.leftover_pids:
        raise ServerError(f"processes {teardown.leftover_pids} outlived the teardown")
    if received:
        print("dspark: stopped.", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    raise ServerError(f"the server exited with code {code}; log: {server.log_path}")
