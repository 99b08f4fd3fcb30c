"""Run the cells of a protocol, one cold server each, and record every cell's evidence.

Per cell: boot from the arm's checked launch, wait for health, run the warmup phases, read
/metrics, run the measured phase, read /metrics again, then tear the server down. The server
log is watched the whole time; a fatal line or a dead server ends the cell early instead of
waiting out a hung phase. A finished valid cell is skipped on a re-run into the same directory.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dspark_cli.bench import records
from dspark_cli.bench.arms import Arm
from dspark_cli.bench.dataset import VerifiedDataset
from dspark_cli.bench.loadgen import PhaseRun, phase_argv, run_phase, scalars
from dspark_cli.bench.protocol import Cell, Protocol
from dspark_cli.bench.validity import Evidence, judge
from dspark_cli.errors import ServerError
from dspark_cli.launch.prepare import Prepared, server_for
from dspark_cli.launch.render import plan_dict
from dspark_cli.server import metrics
from dspark_cli.server.logscan import LogWatcher, Pattern
from dspark_cli.vllm.shim import vllm_command

# How long the server's generation counter may lag the client's count after the last answer.
SETTLE_S = 3.0


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _progress(message: str) -> None:
    print(f"dspark: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class CellContext:
    """What every cell of one run shares."""

    protocol: Protocol
    dataset: VerifiedDataset
    run_dir: Path
    fatal: tuple[Pattern, ...]
    ready_timeout_s: float
    stop_grace_s: float


def protocol_info(protocol: Protocol) -> dict[str, Any]:
    return {
        "name": protocol.name,
        "arms": list(protocol.arms),
        "baseline": protocol.baseline,
        "concurrencies": list(protocol.concurrencies),
    }


def _dataset_info(dataset: VerifiedDataset) -> dict[str, Any]:
    spec = dataset.spec
    return {
        "kind": spec.kind,
        "file": None if spec.request_file is None else str(spec.request_file),
        "sha256": dataset.sha256,
        "rows": dataset.rows,
        "seed": spec.seed,
        "input_tokens": spec.input_tokens,
    }


class _CellRun:
    """One cell's side effects, in order; `record()` turns what happened into its JSON."""

    def __init__(self, cell: Cell, arm: Arm, prepared: Prepared, ctx: CellContext) -> None:
        self.cell, self.arm, self.ctx = cell, arm, ctx
        self.dir = records.cell_dir(ctx.run_dir, cell.id)
        self.prepared = replace(prepared, run_dir=self.dir)
        self.errors: list[str] = []
        self.phases: list[PhaseRun] = []
        self.before: metrics.Scrape | None = None
        self.after: metrics.Scrape | None = None
        self.boot_s: float | None = None
        self.fatal_lines: tuple[str, ...] = ()
        self.teardown: dict[str, Any] | None = None
        self.started_at = _now()

    def run(self) -> dict[str, Any]:
        from dspark_cli.server.process import port_in_use

        self.dir.mkdir(parents=True)
        start = time.monotonic()
        server = server_for(self.arm.plan, self.prepared)
        if port_in_use(server.host, server.port):
            self.errors.append(f"port {server.port} on {server.host} was already in use")
            return self.record(time.monotonic() - start, teardown_s=0.0)
        watcher = LogWatcher(server.log_path, self.ctx.fatal).start()
        teardown_s = 0.0
        try:
            server.start()
            self._boot_and_load(server, watcher)
        finally:
            # Judged up to here: lines printed while the server is being stopped do not count.
            self.fatal_lines = tuple(f"{e.pattern}: {e.line}" for e in watcher.snapshot().fatal)
            t0 = time.monotonic()
            td = server.stop(self.ctx.stop_grace_s)
            teardown_s = time.monotonic() - t0
            watcher.stop()
            self.teardown = {
                "seconds": round(td.seconds, 3),
                "signal": td.signal,
                "leftover_pids": list(td.leftover_pids),
                "port_free": td.port_free,
            }
            if not td.clean:
                self.errors.append(
                    f"teardown left processes {list(td.leftover_pids)} or the port busy"
                )
        return self.record(time.monotonic() - start, teardown_s)

    def _boot_and_load(self, server: Any, watcher: LogWatcher) -> None:
        def dead() -> str | None:
            if watcher.fired.is_set():
                event = watcher.snapshot().fatal[0]
                return f"fatal server log line ({event.pattern}): {event.line}"
            if not server.alive():
                return f"the server exited with code {server.returncode}"
            return None

        try:
            self.boot_s = server.wait_healthy(self.ctx.ready_timeout_s, abort=dead)
        except ServerError as exc:
            self.errors.append(f"boot: {exc.message.splitlines()[0]}")
            return
        _progress(f"{self.cell.id}: healthy after {self.boot_s:.1f} s")
        base_url = self.arm.plan.base_url
        timeout = self.ctx.protocol.metrics_timeout_s
        for phase in self.cell.phases:
            if phase.measured:
                self.before = self._scrape(base_url, timeout, "before")
            argv = vllm_command(
                phase_argv(phase, self.ctx.protocol.sampling, self.ctx.dataset.spec,
                           self.arm.plan, self.dir)
            )  # fmt: skip
            _progress(
                f"{self.cell.id}: {phase.name}: {phase.num_prompts} requests at concurrency "
                f"{phase.concurrency}, up to {phase.output_tokens} tokens"
            )
            result = run_phase(
                argv, phase, self.dir, self.prepared.env, self.ctx.protocol.phase_timeout_s, dead
            )
            self.phases.append(result)
            if result.error:
                self.errors.append(result.error)
                return
            if phase.measured and result.result is not None:
                self.after = self._settled_after(base_url, timeout, result.result)

    def _settled_after(
        self, base_url: str, timeout: float, result: dict[str, Any]
    ) -> metrics.Scrape | None:
        """/metrics after the measured phase. vLLM may count a request's last tokens just after
        answering it, so a count still short of the client's is read again for up to
        SETTLE_S; a count that stays short (or runs over) is a real mismatch."""
        client = result.get("total_output_tokens")
        deadline = time.monotonic() + SETTLE_S
        while True:
            after = self._scrape(base_url, timeout, "after")
            if after is None or self.before is None or client is None:
                return after
            server = after.delta(self.before).total(metrics.GENERATION_TOKENS)
            if server >= client or time.monotonic() > deadline:
                return after
            time.sleep(0.25)

    def _scrape(self, base_url: str, timeout: float, when: str) -> metrics.Scrape | None:
        try:
            return metrics.scrape(base_url, timeout)
        except metrics.ScrapeError as exc:
            self.errors.append(f"/metrics {when} the measured phase: {exc}")
            return None

    def record(self, total_s: float, teardown_s: float) -> dict[str, Any]:
        measured = next((p for p in self.phases if p.phase.measured), None)
        result = measured.result if measured else None
        delta = self.after.delta(self.before) if self.after and self.before else None
        spec = metrics.spec_decode(delta) if delta else None
        evidence = Evidence(
            num_prompts=self.cell.measured.num_prompts,
            completed=None if result is None else int(result.get("completed", 0)),
            failed=None if result is None else int(result.get("failed", 0)),
            client_output_tokens=None if result is None else result.get("total_output_tokens"),
            server_generation_tokens=delta.total(metrics.GENERATION_TOKENS) if delta else None,
            preemptions=delta.total(metrics.PREEMPTIONS) if delta else None,
            fatal_lines=self.fatal_lines,
            errors=tuple(self.errors),
        )
        reasons = judge(evidence)
        load_s = sum(p.duration_s for p in self.phases)
        boot_s = self.boot_s or 0.0
        plan = plan_dict(self.arm.plan)
        spec_dict = spec.as_dict() if spec else None
        return {
            "arm": self.cell.arm,
            "concurrency": self.cell.concurrency,
            "cell_id": self.cell.id,
            "protocol": protocol_info(self.ctx.protocol),
            "valid": not reasons,
            "reasons": list(reasons),
            "output_throughput": None if result is None else result.get("output_throughput"),
            "request_throughput": None if result is None else result.get("request_throughput"),
            "total_output_tokens": evidence.client_output_tokens,
            "completed": evidence.completed,
            "failed": evidence.failed,
            "acceptance_length": None if spec_dict is None else spec_dict["mean_acceptance_length"],
            "per_position_acceptance": None
            if spec is None or not spec.drafts
            else [round(a / spec.drafts, 4) for a in spec.accepted_per_position],
            "spec_decode": spec_dict,
            "metrics_delta": None
            if delta is None
            else {
                "generation_tokens": delta.total(metrics.GENERATION_TOKENS),
                "prompt_tokens": delta.total(metrics.PROMPT_TOKENS),
                "preemptions": delta.total(metrics.PREEMPTIONS),
                "request_success": delta.by_label(metrics.REQUEST_SUCCESS, "finished_reason"),
            },
            "boot_s": None if self.boot_s is None else round(self.boot_s, 3),
            "timings": {
                "boot_s": round(boot_s, 3),
                "load_s": round(load_s, 3),
                "teardown_s": round(teardown_s, 3),
                "total_s": round(total_s, 3),
                # What dspark itself spent on the cell: everything but boot, load, teardown.
                "overhead_s": round(total_s - boot_s - load_s - teardown_s, 3),
            },
            "phases": [
                {
                    "name": p.phase.name,
                    "num_prompts": p.phase.num_prompts,
                    "concurrency": p.phase.concurrency,
                    "output_tokens": p.phase.output_tokens,
                    "measured": p.phase.measured,
                    "returncode": p.returncode,
                    "duration_s": round(p.duration_s, 3),
                    "log": str(p.log),
                    "completed": None if p.result is None else p.result.get("completed"),
                    "failed": None if p.result is None else p.result.get("failed"),
                }
                for p in self.phases
            ],
            "loadgen": None if result is None else scalars(result),
            "fatal_lines": list(self.fatal_lines),
            "teardown": self.teardown,
            "dataset": _dataset_info(self.ctx.dataset),
            "launch": {"argv": self.prepared.argv, "plan": plan},
            "server_log": str(self.dir / "server.log"),
            "started_at": self.started_at,
            "finished_at": _now(),
        }


def run_cell(cell: Cell, arm: Arm, prepared: Prepared, ctx: CellContext) -> dict[str, Any]:
    """Run one cell and write its cell.json; an earlier unfinished attempt is moved aside."""
    moved = records.set_aside(ctx.run_dir, cell.id)
    if moved is not None:
        _progress(f"{cell.id}: earlier attempt kept in {moved}")
    record = _CellRun(cell, arm, prepared, ctx).run()
    path = records.cell_dir(ctx.run_dir, cell.id) / records.CELL_JSON
    path.write_text(json.dumps(record, indent=2) + "\n")
    record["record_path"] = str(path)
    return record


def run_cells(
    cells: Sequence[Cell],
    arms: dict[str, Arm],
    prepare: Callable[[Arm], Prepared],
    ctx: CellContext,
    stop_on_failure: bool,
) -> list[dict[str, Any]]:
    """Run the cells in order, skipping finished valid ones; returns the records of this run.

    Every arm a pending cell needs is prepared (preflight, vLLM's validation, the record)
    before the first boot, so a wrong arm fails in seconds, not after hours of other cells.
    """
    pending = [c for c in cells if records.finished_valid(ctx.run_dir, c.id) is None]
    for cell in cells:
        if cell not in pending:
            _progress(f"{cell.id}: finished and valid in an earlier run; skipped")
    prepared = {name: prepare(arms[name]) for name in dict.fromkeys(c.arm for c in pending)}
    done = []
    for i, cell in enumerate(pending, start=1):
        tag = f"[{i}/{len(pending)}] {cell.id}"
        _progress(f"{tag}: booting a cold server")
        record = run_cell(cell, arms[cell.arm], prepared[cell.arm], ctx)
        done.append(record)
        if record["valid"]:
            _progress(f"{tag}: valid, {record['output_throughput']:.1f} output tok/s")
        else:
            _progress(f"{tag}: INVALID: {'; '.join(record['reasons'])}")
            if stop_on_failure:
                _progress("stopping at the first invalid cell (--stop-on-failure)")
                break
        if record["teardown"] and not (
            record["teardown"]["port_free"] and not record["teardown"]["leftover_pids"]
        ):
            raise ServerError(
                f"{cell.id}: the server's teardown left processes or the port busy, so later "
                "cells cannot boot cleanly; stopping.",
                hint=f"Check for leftover vLLM processes; the cell's log is in {ctx.run_dir}.",
            )
    return done
