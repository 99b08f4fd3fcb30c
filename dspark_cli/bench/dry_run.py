"""A protocol's plan as text or as a dict (pure): a summary (arms, cells, cold boots, requests,
an estimate of the wall time), and behind `commands` every cell's launch command and every
phase's load command, shell-ready, exactly as a real run would execute them.

Also what `dspark bench` watches in every cell beside its health, its log's fatal lines and its
counters, as a dry run lists it (`watch_plan`; docs/bench.md, "Watches")."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.bench import records
from dspark_cli.bench.arms import Arm, compose_arms
from dspark_cli.bench.dataset import DatasetSpec, input_findings
from dspark_cli.bench.loadgen import phase_argv
from dspark_cli.bench.past_runs import SAME, Evidence, latest
from dspark_cli.bench.protocol import Cell, Protocol, on_off
from dspark_cli.bench.workflow import protocol_of
from dspark_cli.console import print_json
from dspark_cli.deploy.start import deploy_target, dry_preflight
from dspark_cli.errors import worst
from dspark_cli.launch.checks import exit_code, print_findings
from dspark_cli.launch.render import command_lines
from dspark_cli.launch.render import plan_dict as launch_dict
from dspark_cli.machine.gpu_sampler import find_tool
from dspark_cli.status import Finding, Status
from dspark_cli.untrusted import RecordError

if TYPE_CHECKING:
    from dspark_cli.config.bench import BenchPrimary
    from dspark_cli.config.schema import LogsConf
    from dspark_cli.config.validate import ValidatePrimary
    from dspark_cli.config.watch import WatchConf


def _dataset_line(dataset: DatasetSpec) -> str:
    file = dataset.request_file
    if file is None:
        return f"random prompts of {dataset.input_tokens} tokens (seed {dataset.seed})"
    pin = (
        f"pinned sha256 {dataset.sha256}"
        if dataset.sha256
        else "NOT PINNED: a real run refuses it until bench.dataset.sha256 is set"
    )
    return f"{dataset.kind} {file} ({pin})"


def _loads(cell: Cell, protocol: Protocol, dataset: DatasetSpec, arm: Arm, run_dir: Path):
    out_dir = records.cell_dir(run_dir, cell.id)
    return [
        (phase, phase_argv(phase, protocol.requests, dataset, arm.plan, out_dir,
                           objectives=protocol.objectives))
        for phase in cell.phases
    ]


def _launch(arm: Arm) -> tuple[str, str]:
    """How a cell of `arm` starts (a comment) and the text its deploy target runs: the plan's
    command (one node here), every node's block (several nodes here), the job script (Slurm),
    the manifests (Kubernetes)."""
    layout = arm.plan.layout
    target = deploy_target(arm.cfg)
    text = target.render(arm.cfg, arm.plan)
    if not target.here:
        return (f"a cold {target.what} for this cell (the load goes to its head once it "
                "runs)", text)
    if layout.nodes > 1:
        return f"{layout.nodes} cold nodes on this host for this cell (head 127.0.0.1)", text
    return "a cold server for this cell", text


def _lossless_line(protocol: Protocol) -> str:
    spec = protocol.lossless
    if spec is None:
        return "not checked (bench.lossless.enabled=false)"
    return (f"every cell answers {spec.prompts} (sha256 {spec.sha256}) greedily, {spec.max_tokens} "
            f"tokens each; at least {spec.min_identical:.0%} of the sequences must be "
            f"{spec.reference}'s")


@dataclass(frozen=True)
class Estimate:
    """What the wall-time estimate uses: an earlier run's figures (`evidence`), else what
    `bench.estimate` assumes."""

    boot_s: float
    tokens_per_s: float
    evidence: Evidence | None = None

    @property
    def basis(self) -> str:
        """Where the figures come from, in words."""
        ev = self.evidence
        if ev is None:
            return (f"assumes a {self.boot_s:.0f} s boot and {self.tokens_per_s:g} output "
                    "tokens/s per request, every answer at full length: bench.estimate.*")
        return (f"a {self.boot_s:.0f} s boot and {self.tokens_per_s:.3g} output tokens/s per "
                f"request as measured by the {ev.kind} run {ev.source} on this profile, every "
                "answer at full length")

    def cell_s(self, cell: Cell, protocol: Protocol) -> float:
        """A cold boot, then each phase in waves of `concurrency` requests at full length,
        then the lossless prompts one at a time: an upper bound where answers end early."""
        load = sum(math.ceil(p.num_prompts / p.concurrency) * p.output_tokens
                   for p in cell.phases)
        spec = protocol.lossless
        greedy = 0 if spec is None else _prompt_count(spec.prompts) * spec.max_tokens
        return self.boot_s + (load + greedy) / self.tokens_per_s


def estimate_of(cfg: BenchPrimary | ValidatePrimary, root: Path) -> Estimate:
    """The latest bench or smoke run's figures under `root` on the same hardware and model
    (`past_runs.latest`), else `bench.estimate` as an assumption."""
    found = latest(root, {group: str(getattr(cfg, group).name) for group in SAME})
    if found is not None:
        return Estimate(found.boot_s, found.tokens_per_s, found)
    return Estimate(cfg.bench.estimate.boot_s, cfg.bench.estimate.tokens_per_s)


def _prompt_count(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return 0


def _prefix_caching_line(protocol: Protocol) -> str:
    """The axis in words: each arm as configured, or also with prefix caching off (more cells)."""
    if protocol.prefix_caching == (True,):
        return "# prefix caching: as configured (bench.prefix_caching=[on])"
    settings = ", ".join(on_off(pc) for pc in protocol.prefix_caching)
    return (f"# prefix caching: {settings} for every arm ({len(protocol.variants)} launches; "
            "off is serving.args.enable_prefix_caching=false)")


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


def summary(protocol: Protocol, dataset: DatasetSpec, run_dir: Path,
            estimate: Estimate | None) -> dict[str, Any]:
    """The plan in numbers: cells (each a cold boot), requests, and the estimated wall time."""
    cells = protocol.cells
    requests = sum(p.num_prompts for c in cells for p in c.phases)
    out: dict[str, Any] = {"arms": list(protocol.arms),
                           "prefix_caching": [on_off(pc) for pc in protocol.prefix_caching],
                           "launches": len(protocol.variants), "cells": len(cells),
                           "cold_boots": len(cells), "requests": requests,
                           "measured_requests": sum(c.measured.num_prompts for c in cells),
                           "run_dir": str(run_dir), "estimate_s": None}
    if estimate is not None:
        left = [c for c in cells if not _finished(run_dir, c)]
        out["estimate_s"] = round(sum(estimate.cell_s(c, protocol) for c in left))
        out["estimate_cells"] = len(left)
        out["estimate_assumes"] = {"boot_s": estimate.boot_s,
                                   "tokens_per_s": estimate.tokens_per_s}
        out["estimate_from"] = None if estimate.evidence is None else estimate.evidence.to_dict()
    return out


def _finished(run_dir: Path, cell: Cell) -> bool:
    """A resumed run skips the cell (a finished valid record); an unreadable record is not."""
    try:
        return records.finished_valid(run_dir, cell.id) is not None
    except RecordError:
        return False


def summary_text(protocol: Protocol, dataset: DatasetSpec, run_dir: Path,
                 estimate: Estimate | None) -> str:
    numbers = summary(protocol, dataset, run_dir, estimate)
    lines = [
        f"# dspark bench: protocol {protocol.name}, baseline {protocol.baseline}",
        f"# arms: {', '.join(protocol.arms)}; concurrencies: "
        f"{', '.join(map(str, protocol.concurrencies))}; repeats: {protocol.repeats}",
        _prefix_caching_line(protocol),
        f"# cells: {numbers['cells']}, each on its own cold server ({numbers['cold_boots']} "
        f"cold boots); requests: {numbers['requests']} ({numbers['measured_requests']} "
        "measured)",
        f"# request set: {_dataset_line(dataset)}",
        f"# lossless: {_lossless_line(protocol)}",
    ]
    if estimate is not None:
        left = numbers["estimate_cells"]
        what = ("" if left == numbers["cells"] else
                f" for the {left} of {numbers['cells']} cells left to run")
        lines.append(f"# estimated wall time: about {_duration(numbers['estimate_s'])}{what} "
                     f"({estimate.basis})")
    lines += [f"# run directory: {run_dir}", "#"]
    lines += [f"#   cell {c.id}: {sum(p.num_prompts for p in c.phases)} requests, "
              f"{len(c.phases)} phases" for c in protocol.cells]
    lines.append("# every cell's launch and load commands: --commands (or --json)")
    return "\n".join(lines) + "\n"


def plan_text(
    protocol: Protocol, dataset: DatasetSpec, arms: Mapping[str, Arm], run_dir: Path,
    estimate: Estimate | None = None, commands: bool = True,
) -> str:
    if not commands:
        return summary_text(protocol, dataset, run_dir, estimate)
    cells, sampling = protocol.cells, protocol.requests
    lines = [
        f"# dspark bench: protocol {protocol.name}, {len(cells)} cells, baseline "
        f"{protocol.baseline}",
        f"# arms: {', '.join(protocol.arms)}; concurrencies: "
        f"{', '.join(map(str, protocol.concurrencies))}; repeats: {protocol.repeats} (each a "
        f"cold boot); equivalence margin: {protocol.equivalence_margin:.0%}",
        _prefix_caching_line(protocol),
        f"# sampling: temperature {sampling.temperature}, top-p {sampling.top_p}, max output "
        f"{sampling.max_output_tokens}" + (", ignore_eos" if sampling.ignore_eos else ""),
        f"# request set: {_dataset_line(dataset)}",
        f"# lossless: {_lossless_line(protocol)}",
        f"# run directory: {run_dir}",
        "",
    ]
    for i, cell in enumerate(cells, start=1):
        arm = arms[cell.variant]
        how, text = _launch(arm)
        lines += [
            f"# ---- cell {i}/{len(cells)}: {cell.id} (arm {cell.arm}, prefix caching "
            f"{on_off(cell.prefix_caching)}, concurrency {cell.concurrency}, repeat "
            f"{cell.repeat}) ----",
            f"# launch: {how}",
            text.rstrip("\n"),
        ]
        for phase, argv in _loads(cell, protocol, dataset, arm, run_dir):
            what = "measured" if phase.measured else "warmup"
            lines += [
                f"# {phase.name} ({what}): {phase.num_prompts} requests at concurrency "
                f"{phase.concurrency}, output {phase.output_tokens} tokens",
                command_lines(argv),
            ]
        lines.append("")
    return "\n".join(lines)


def plan_dict(
    protocol: Protocol,
    dataset: DatasetSpec,
    arms: Mapping[str, Arm],
    run_dir: Path,
    findings: Mapping[str, Sequence[Any]],
    estimate: Estimate | None = None,
) -> dict[str, Any]:
    return {
        "summary": summary(protocol, dataset, run_dir, estimate),
        "protocol": {
            "name": protocol.name,
            "arms": list(protocol.arms),
            "baseline": protocol.baseline,
            "concurrencies": list(protocol.concurrencies),
            "repeats": protocol.repeats,
            "prefix_caching": [on_off(pc) for pc in protocol.prefix_caching],
            "equivalence_margin": protocol.equivalence_margin,
            "sampling": vars(protocol.requests),
            "lossless": None if protocol.lossless is None else {
                **vars(protocol.lossless), "prompts": str(protocol.lossless.prompts)},
        },
        "dataset": {
            "kind": dataset.kind,
            "file": None if dataset.request_file is None else str(dataset.request_file),
            "sha256": dataset.sha256,
            "seed": dataset.seed,
        },
        "run_dir": str(run_dir),
        "preflight": {arm: [f.to_dict() for f in found] for arm, found in findings.items()},
        "cells": [
            {
                "id": cell.id,
                "arm": cell.arm,
                "prefix_caching": cell.prefix_caching,
                "concurrency": cell.concurrency,
                "repeat": cell.repeat,
                "launch": launch_dict(arms[cell.variant].plan),
                "phases": [
                    {**vars(phase), "argv": argv} for phase, argv
                    in _loads(cell, protocol, dataset, arms[cell.variant], run_dir)
                ],
            }
            for cell in protocol.cells
        ],
    }


@dataclass(frozen=True)
class WatchLine:
    name: str
    on: bool
    what: str  # what it does, with its setting; or why it is off and how to turn it on


def watch_plan(watch: WatchConf, logs: LogsConf, gpu_tool: str | None) -> list[WatchLine]:
    """Every watch a cell runs (`watch.*`, `logs.fallbacks`, `logs.degraded`), on or off, with
    the key that changes it; `gpu_tool`: the vendor tool the GPUs would be sampled with."""
    stall_s, poll_s, min_acceptance = watch.stall_s, watch.poll_s, watch.min_acceptance
    gpu_interval_s, gpu_idle_below = watch.gpu_interval_s, watch.gpu_idle_below
    fallbacks = [k for k, v in logs.fallbacks.items() if v is not None]
    degraded = [k for k, v in logs.degraded.items() if v is not None]
    gpu_on = bool(gpu_interval_s) and gpu_tool is not None
    gpu = (f"every {gpu_interval_s:g} s through {gpu_tool}: utilisation, memory, power, SM "
           f"clock, temperature per GPU; flags a GPU that throttled or sat below "
           f"{gpu_idle_below:g}% in the measured phase (watch.gpu_interval_s=0 turns it off)"
           if gpu_on else "watch.gpu_interval_s is 0" if not gpu_interval_s else
           "no nvidia-smi, amd-smi or rocm-smi on PATH (a CPU machine)")
    return [
        WatchLine("stall", bool(stall_s),
                  f"reads /metrics every {poll_s:g} s; requests running or waiting and no "
                  f"token generated for {stall_s:g} s end the cell as invalid, `stalled` "
                  "(watch.stall_s=0 turns it off)" if stall_s else "watch.stall_s is 0"),
        WatchLine("fallbacks", True,
                  f"log lines {', '.join(fallbacks) or '(none configured)'} and the DSpark "
                  "draft's parameter count: an arm that asked for adaptive verification and "
                  "ran without it is invalid (logs.fallbacks.<name>=null turns a family off)"),
        WatchLine("degraded", bool(degraded),
                  f"log lines {', '.join(degraded)}: the cell stays valid and is marked "
                  "degraded (logs.degraded.<name>=null turns a family off)"),
        WatchLine("acceptance", min_acceptance is not None,
                  f"a speculating arm whose acceptance rate is at or below {min_acceptance:g} "
                  "is flagged (watch.min_acceptance=null turns it off)"
                  if min_acceptance is not None else "watch.min_acceptance is null"),
        WatchLine("cold_start", True, "the boot split into the phases its log shows (engine, "
                  "weights, graph capture with the adaptive profile, engine init, API)"),
        WatchLine("gpus", gpu_on, gpu),
    ]


def watch_text(lines: Sequence[WatchLine]) -> str:
    """The dry run's comment block."""
    return "".join(f"# watch {w.name}: {'on' if w.on else 'OFF'}: {w.what}\n" for w in lines)


def watch_dicts(lines: Sequence[WatchLine]) -> list[dict[str, object]]:
    return [asdict(w) for w in lines]


def dry_run(cfg: BenchPrimary, directory: Path, as_json: bool, commands: bool) -> int:
    """`dspark bench --dry-run`: the plan (text, or JSON with every arm's preflight), the
    inputs' and every arm's preflight failures on stderr; the worst finding's exit code."""
    protocol, dataset = protocol_of(cfg)
    arms = compose_arms(cfg, protocol)
    estimate = estimate_of(cfg, Path.cwd())
    watches = watch_plan(cfg.watch, cfg.logs,
                         find_tool() if cfg.watch.gpu_interval_s else None)
    inputs = input_findings(protocol, dataset)
    findings = {name: dry_preflight(arm.cfg, arm.plan, deploy_target(arm.cfg))
                for name, arm in arms.items()}
    if as_json:
        print_json({**plan_dict(protocol, dataset, arms, directory, findings, estimate),
                    "inputs": [f.to_dict() for f in inputs], "watches": watch_dicts(watches)})
    else:
        sys.stdout.write(plan_text(protocol, dataset, arms, directory, estimate,
                                   commands=commands))
        sys.stdout.write(watch_text(watches))
    print_findings([f for f in inputs if f.failed])
    _print_arm_findings(findings)
    return worst([exit_code(inputs), *(exit_code(f) for f in findings.values())])


def _print_arm_findings(findings: Mapping[str, Sequence[Finding]]) -> None:
    """Preflight failures per arm, to stderr; a skip that several arms share, once."""
    skipped: dict[tuple[str, str], Finding] = {}
    for arm, found in findings.items():
        print_findings([f for f in found if f.failed], label=arm)
        for f in found:
            if f.status is Status.skipped:
                skipped.setdefault((f.rule, f.message), f)
    print_findings(list(skipped.values()))
