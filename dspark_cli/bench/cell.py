"""A cell's record (cell.json): a frozen value built from what the cell observed (pure), and
read back for resume and the summary. The file format is the JSON of `to_dict()`.

Whether a cell's number may be reported (pure): the report's rules, checked every time.

A cell is valid only when the client and the server agree on how many tokens were generated
in the measured phase, nothing was preempted, no request failed, the server log shows no
fatal line, and (where the protocol checks it) its greedy answers are the reference arm's
(`lossless.py`). An invalid cell keeps all its reasons and never enters an average or a speedup.

Speculative decoding that runs but is not what was asked (pure): an arm that asked for
adaptive verification and ran without it, and a drafter that accepts (almost) nothing.
vLLM does not fail closed on either. Adaptive verification is refused at startup with a line
of its own, or the V1 model runner is chosen (it refuses DSpark), or the confidence head is
missing and vLLM silently switches to its online acceptance estimator (the DSpark draft's
load line then counts one parameter fewer: `draft_params`); the first two are log families
(`logs.fallbacks`), the last the draft's pin. A cell whose arm asked for adaptive verification
and shows any of them is invalid (`adaptive_reasons`). An acceptance rate at or below
`watch.min_acceptance` (0.0: none accepted) is flagged, not invalid (`acceptance_flag`): the
number is real, the speculation is useless (0% acceptance was seen on ROCm in more than one
engine)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dspark_cli.bench import goodput as gp
from dspark_cli.bench.loadgen import PhaseRun, latency_ms, scalars
from dspark_cli.bench.lossless import Comparison, lossless_reason
from dspark_cli.bench.protocol import Cell, Protocol, cell_id, variant
from dspark_cli.server import metrics
from dspark_cli.server.process import Teardown
from dspark_cli.untrusted import (
    AMOUNT,
    BOOL,
    COUNT,
    FRACTION,
    INT,
    LIST,
    MAP,
    MARGIN,
    NUMBER,
    SCALARS,
    TEXT,
)


@dataclass(frozen=True)
class CellTimings:
    boot_s: float
    load_s: float
    teardown_s: float
    total_s: float

    def to_dict(self) -> dict[str, float]:
        return {"boot_s": round(self.boot_s, 3), "load_s": round(self.load_s, 3),
                "teardown_s": round(self.teardown_s, 3), "total_s": round(self.total_s, 3),
                # What dspark itself spent on the cell: everything but boot, load, teardown.
                "overhead_s": round(self.total_s - self.boot_s - self.load_s
                                    - self.teardown_s, 3)}


# The fields of cell.json (`CellRecord.to_dict`, below) that are read back, and their JSON types
# (`untrusted.check`): a field added to the record is added here.
FIELDS = {
    "arm": TEXT, "concurrency": COUNT, "repeat": COUNT, "cell_id": TEXT, "valid": BOOL,
    "reasons": LIST, "reasons.*": TEXT, "protocol": MAP, "protocol.name": TEXT,
    "protocol.arms": LIST, "protocol.arms.*": TEXT, "protocol.baseline": TEXT,
    "protocol.concurrencies": LIST, "protocol.concurrencies.*": COUNT, "protocol.repeats": COUNT,
    "protocol.equivalence_margin": MARGIN, "output_throughput": AMOUNT,
    "request_throughput": AMOUNT, "total_output_tokens": COUNT, "acceptance_length": AMOUNT,
    "accepted_per_draft": AMOUNT, "latency_ms": MAP, "latency_ms.*": MAP,
    "latency_ms.*.*": AMOUNT, "boot_s": AMOUNT, "finished_at": TEXT, "teardown": MAP,
    "teardown.seconds": AMOUNT, "teardown.signal": TEXT, "teardown.leftover_pids": LIST,
    "teardown.leftover_pids.*": INT, "teardown.port_free": BOOL, "teardown.deployment": TEXT,
    "teardown.deployment_gone": BOOL, "spec_decode": MAP, "spec_decode.drafts": COUNT,
    "spec_decode.draft_tokens": COUNT, "spec_decode.accepted": COUNT, "loadgen": MAP,
    "dataset": MAP, "dataset.kind": TEXT, "dataset.file": TEXT, "dataset.sha256": TEXT,
    "launch": MAP, "launch.plan": MAP, "launch.plan.model_path": TEXT, "lossless": MAP,
    "degraded": LIST, "degraded.*": TEXT, "engagement": MAP, "engagement.outcome": TEXT,
    "engagement.ok": BOOL, "engagement.sentence": TEXT, "engagement.expected": TEXT,
    "engagement.steps": COUNT, "engagement.short_steps": COUNT, "engagement.k": COUNT,
    "engagement.trimmed_tokens": INT, "engagement.widths": LIST, "engagement.widths.*": COUNT,
    "draft_params": MAP, "draft_params.params": INT,
    "draft_params.expected": INT, "draft_params.ok": BOOL, "draft_params.sentence": TEXT,
    "protocol.objectives": MAP, "protocol.objectives.ttft_ms": AMOUNT,
    "protocol.objectives.tpot_ms": AMOUNT, "protocol.objectives.e2el_ms": AMOUNT,
    "protocol.objectives.percentile": AMOUNT, "goodput": MAP, "goodput.requests": COUNT,
    "goodput.good": COUNT, "goodput.share": FRACTION, "goodput.request_goodput": AMOUNT,
    "goodput.output_goodput": AMOUNT, "goodput.vllm_request_goodput": AMOUNT,
    "goodput.met": BOOL, "completed": COUNT, "failed": COUNT, "prefix_caching": BOOL,
    "protocol.prefix_caching": LIST, "protocol.prefix_caching.*": BOOL,
}
FIELDS |= {  # the watches' sections, read by report/evidence.py
    "per_position_acceptance": LIST, "per_position_acceptance.*": AMOUNT, "stall": MAP,
    "stall.sentence": TEXT, "request_set": MAP, "request_set.name": TEXT,
    "request_set.sha256": TEXT, "request_set.chat_templated": BOOL,
    "request_set.random_tokens": BOOL, "acceptance_check": MAP, "acceptance_check.rate": AMOUNT,
    "acceptance_check.flagged": BOOL, "acceptance_check.sentence": TEXT, "fallbacks": LIST,
    "fallbacks.*": TEXT, "cold_start": MAP, "cold_start.phases_s": MAP,
    "cold_start.phases_s.*": NUMBER, "cold_start.boot_s": AMOUNT,
    "cold_start.before_first_line_s": AMOUNT, "gpus": MAP, "gpus.tool": TEXT, "gpus.flags": LIST,
    "gpus.flags.*": TEXT, "gpus.measured": LIST, "gpus.measured.*": MAP,
    "gpus.measured.*.means": MAP, "gpus.measured.*.means.*": NUMBER,
}
_LOSSLESS = {  # lossless.answer's section, and its comparison (lossless.Comparison)
    "prompts": TEXT, "prompts_sha256": TEXT, "max_tokens": COUNT, "reference": TEXT,
    "min_identical": FRACTION, "texts": LIST, "texts.*": TEXT, "token_ids": LIST,
    "token_ids.*": LIST, "token_ids.*.*": INT, "errors": LIST, "errors.*": TEXT,
    "comparison": MAP, "comparison.reference_cell": TEXT, "comparison.compared_by": TEXT,
    "comparison.identical": COUNT, "comparison.total": COUNT, "comparison.share": FRACTION,
    "comparison.divergences": LIST, "comparison.divergences.*": MAP,
    "comparison.divergences.*.prompt": COUNT, "comparison.divergences.*.index": COUNT,
}
_ENGAGEMENT = {  # runner.engagement_record
    "level": TEXT, "requests": COUNT, "reported": COUNT, "draft_tokens": COUNT,
    "accepted": COUNT, "problems": LIST, "problems.*": TEXT, "why": TEXT, "asked": MAP,
    "asked.level": TEXT, "asked.by": TEXT, "asked.why": TEXT,
}
_PHASE = {"name": TEXT, "num_prompts": COUNT, "concurrency": COUNT, "output_tokens": COUNT,
          "measured": BOOL, "returncode": INT, "duration_s": AMOUNT, "log": TEXT,
          "completed": COUNT, "failed": COUNT}
_LATENCY = {f"loadgen.{s}_{m}_ms": AMOUNT for s in ("mean", "median", "std", "p50", "p90",
                                                     "p99") for m in ("ttft", "tpot", "itl",
                                                                      "e2el")}
FIELDS |= {  # the sections the cell keeps as evidence, each field of its JSON type
    **{f"lossless.{k}": v for k, v in _LOSSLESS.items()},
    **{f"engagement.{k}": v for k, v in _ENGAGEMENT.items()},
    "phases": LIST, "phases.*": MAP, **{f"phases.*.{k}": v for k, v in _PHASE.items()},
    "spec_decode.accepted_per_position": LIST, "spec_decode.accepted_per_position.*": COUNT,
    "spec_decode.acceptance_rate": AMOUNT, "spec_decode.mean_acceptance_length": AMOUNT,
    "metrics_delta": MAP, "metrics_delta.generation_tokens": AMOUNT,
    "metrics_delta.prompt_tokens": AMOUNT, "metrics_delta.preemptions": AMOUNT,
    "metrics_delta.request_success": MAP, "metrics_delta.request_success.*": AMOUNT,
    "timings": MAP, "timings.*": NUMBER,
    # vLLM's own result (`vllm bench serve`), kept as it printed it; the latencies are read.
    "loadgen.*": SCALARS, **_LATENCY, "loadgen.completed": COUNT, "loadgen.failed": COUNT,
    "fatal_lines": LIST, "fatal_lines.*": TEXT, "dataset.rows": COUNT, "dataset.seed": INT,
    "dataset.input_tokens": COUNT, "launch.argv": LIST, "launch.argv.*": TEXT,
    "launch.plan.env": MAP, "launch.plan.env.*": TEXT, "launch.plan.argv": LIST,
    "launch.plan.argv.*": TEXT, "launch.plan.base_url": TEXT,
    "launch.plan.served_model_name": TEXT, "launch.base_url": TEXT, "server_log": TEXT,
    "started_at": TEXT, "adaptive_asked": BOOL, "draft_params.line": COUNT,
    "request_set.kind": TEXT, "request_set.rows": COUNT, "request_set.sentence": TEXT,
    "acceptance_check.floor": AMOUNT, "gpus.interval_s": AMOUNT, "gpus.samples": COUNT,
    "gpus.window_s": LIST, "gpus.window_s.*": NUMBER, "gpus.whole_run": LIST,
    "gpus.whole_run.*": MAP, "gpus.whole_run.*.means": MAP,
    "gpus.whole_run.*.means.*": NUMBER, "gpus.error": TEXT, "gpus.file": TEXT,
    **{f"gpus.{s}.*.{k}": v for s in ("whole_run", "measured") for k, v in (
        ("gpu", TEXT), ("samples", COUNT), ("max_temperature_c", NUMBER),
        ("throttled_share", FRACTION), ("idle", BOOL))},
    "stall.reason": TEXT, "stall.engine": TEXT, "stall.seconds_without_token": AMOUNT,
    "stall.stall_s": AMOUNT, "stall.running": AMOUNT, "stall.waiting": AMOUNT,
    "stall.generation_tokens": AMOUNT, "stall.tripped_at": TEXT, "stall.engines": MAP,
    "stall.engines.*": MAP, "stall.engines.*.*": SCALARS,
    "cold_start.markers": MAP, "cold_start.markers.*": MAP,
    "cold_start.markers.*.at_s": AMOUNT, "cold_start.markers.*.took_s": AMOUNT,
    "cold_start.total_s": AMOUNT,
}
FIELDS |= {  # the boot's caches and the load generator (report/evidence.py)
    "caches": MAP, "caches.warm": BOOL, "caches.boot": MAP, "caches.boot.*": MAP,
    "caches.boot.*.took_s": AMOUNT, "caches.boot.*.cache": TEXT, "load_generator": MAP,
    "caches.dirs": MAP, "caches.dirs.*": MAP, "caches.dirs.*.cache": TEXT,
    "load_generator.pid": INT, "load_generator.phases": COUNT, "profiles": MAP,
    "profiles.*": TEXT,
}
REQUIRED = ("arm", "concurrency", "valid", "protocol", "protocol.name", "protocol.arms",
            "protocol.arms.*", "protocol.baseline", "protocol.concurrencies",
            "protocol.concurrencies.*")


@dataclass(frozen=True)
class CellRecord:
    """One cell's (one repeat's) evidence and verdict. Fields the summary reads are typed; the
    evidence it only carries (load generator scalars, counters, launch) is kept as read."""

    arm: str
    concurrency: int
    valid: bool
    reasons: tuple[str, ...]
    protocol: Protocol
    output_throughput: float | None = None
    request_throughput: float | None = None
    total_output_tokens: int | None = None
    acceptance_length: float | None = None  # 1 + accepted / drafts (the bonus token counts)
    boot_s: float | None = None
    finished_at: str = ""
    teardown: Teardown | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)  # the rest of cell.json
    repeat: int = 1
    accepted_per_draft: float | None = None  # mean accepted draft tokens per draft
    latency_ms: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # ttft: p50..
    lossless: Mapping[str, Any] | None = None  # the greedy probe's answers and comparison
    degraded: tuple[str, ...] = ()  # "family: line" where vLLM overrode what was asked
    goodput: gp.Goodput | None = None  # under the protocol's objectives, when it has any
    # Whether verification trimmed (runner.py's engagement probe), and the DSpark draft's parameter
    # count against its pin; None where the arm does not speculate / has no pin.
    engagement: Mapping[str, Any] | None = None
    draft_params: Mapping[str, Any] | None = None
    prefix_caching: bool = True  # False: the arm ran with prefix caching off

    @property
    def variant(self) -> str:
        return variant(self.arm, self.prefix_caching)

    @property
    def cell_id(self) -> str:
        return cell_id(self.arm, self.prefix_caching, self.concurrency, self.repeat,
                       self.protocol.repeats)

    def to_dict(self) -> dict[str, Any]:
        return {
            "arm": self.arm, "prefix_caching": self.prefix_caching,
            "concurrency": self.concurrency, "repeat": self.repeat, "cell_id": self.cell_id,
            "protocol": self.protocol.to_dict(), "valid": self.valid,
            "reasons": list(self.reasons), "output_throughput": self.output_throughput,
            "request_throughput": self.request_throughput,
            "total_output_tokens": self.total_output_tokens,
            "acceptance_length": self.acceptance_length,
            "accepted_per_draft": self.accepted_per_draft,
            "latency_ms": {k: dict(v) for k, v in self.latency_ms.items()},
            "boot_s": self.boot_s, "teardown": self.teardown.to_dict() if self.teardown else None,
            "finished_at": self.finished_at, "lossless": self.lossless,
            "degraded": list(self.degraded),
            "goodput": None if self.goodput is None else self.goodput.to_dict(),
            "engagement": self.engagement, "draft_params": self.draft_params, **self.evidence,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CellRecord:
        """A record from cell.json; KeyError/TypeError/ValueError when it is not one. A record
        written before repeats, per-draft acceptance and latency were fields is one repeat, and
        gets the other two from the evidence it kept (spec_decode, loadgen)."""
        td = data.get("teardown")
        own = {"arm", "concurrency", "repeat", "cell_id", "protocol", "valid", "reasons",
               "output_throughput", "request_throughput", "total_output_tokens",
               "acceptance_length", "accepted_per_draft", "latency_ms", "boot_s", "teardown",
               "finished_at", "lossless", "degraded", "goodput", "engagement", "draft_params",
               "prefix_caching"}
        latency = data.get("latency_ms")
        info = Protocol.from_dict(data["protocol"])
        return cls(
            arm=str(data["arm"]), concurrency=int(data["concurrency"]),
            valid=bool(data["valid"]), reasons=tuple(data.get("reasons") or ()),
            protocol=info, repeat=int(data.get("repeat", 1)),
            prefix_caching=data.get("prefix_caching") is not False,
            accepted_per_draft=data["accepted_per_draft"] if "accepted_per_draft" in data
            else _per_draft(data.get("spec_decode")),
            latency_ms={str(k): {str(p): float(v) for p, v in ps.items()}
                        for k, ps in latency.items()} if latency is not None
            else latency_ms(data.get("loadgen")),
            output_throughput=data.get("output_throughput"),
            request_throughput=data.get("request_throughput"),
            total_output_tokens=data.get("total_output_tokens"),
            acceptance_length=data.get("acceptance_length"), boot_s=data.get("boot_s"),
            finished_at=str(data.get("finished_at") or ""),
            teardown=Teardown.from_dict(td) if td else None,
            lossless=data.get("lossless") if isinstance(data.get("lossless"), Mapping) else None,
            degraded=tuple(str(x) for x in data.get("degraded") or ()),
            goodput=gp.Goodput.from_dict(data["goodput"], info.objectives)
            if data.get("goodput") else None,
            engagement=_section(data, "engagement"), draft_params=_section(data, "draft_params"),
            evidence={k: v for k, v in data.items() if k not in own},
        )


def _section(data: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = data.get(key)
    return value if isinstance(value, Mapping) else None


def _per_draft(spec: Mapping[str, Any] | None) -> float | None:
    """Mean accepted tokens per draft from the spec-decode counters; None without a draft."""
    if not spec or not spec.get("drafts"):
        return None
    return round(spec["accepted"] / spec["drafts"], 4)


@dataclass(frozen=True)
class Observed:
    """What one cell's run saw (the runner fills it in as it goes)."""

    cell: Cell
    phases: tuple[PhaseRun, ...]
    before: metrics.Scrape | None
    after: metrics.Scrape | None
    boot_s: float | None
    fatal_lines: tuple[str, ...]
    errors: tuple[str, ...]
    teardown: Teardown | None
    timings: CellTimings
    started_at: str
    finished_at: str
    lossless: Mapping[str, Any] | None = None  # the probe's answers, compared (runner.py)
    degraded: tuple[str, ...] = ()  # lines where vLLM overrode what was asked
    engagement: Mapping[str, Any] | None = None  # engagement_probe.record
    draft_params: Mapping[str, Any] | None = None  # server/draft_params.seen_params


def _phase(p: PhaseRun) -> dict[str, Any]:
    return {"name": p.phase.name, "num_prompts": p.phase.num_prompts,
            "concurrency": p.phase.concurrency, "output_tokens": p.phase.output_tokens,
            "measured": p.phase.measured, "returncode": p.returncode,
            "duration_s": round(p.duration_s, 3), "log": str(p.log),
            "completed": None if p.result is None else p.result.get("completed"),
            "failed": None if p.result is None else p.result.get("failed")}


def _delta(delta: metrics.Scrape) -> dict[str, Any]:
    return {"generation_tokens": delta.total(metrics.GENERATION_TOKENS),
            "prompt_tokens": delta.total(metrics.PROMPT_TOKENS),
            "preemptions": delta.total(metrics.PREEMPTIONS),
            "request_success": delta.by_label(metrics.REQUEST_SUCCESS, "finished_reason")}


def build(seen: Observed, protocol: Protocol,
          carried: Mapping[str, Any]) -> CellRecord:
    """The cell's record: its evidence judged by the validity rules. `carried` is context
    recorded as is (dataset, launch, server log)."""
    measured = next((p for p in seen.phases if p.phase.measured), None)
    result = measured.result if measured else None
    delta = seen.after.delta(seen.before) if seen.after and seen.before else None
    spec = metrics.spec_decode(delta) if delta else None
    errors: Sequence[str] = seen.errors
    if seen.teardown is not None and not seen.teardown.clean:
        errors = (*errors, f"teardown left processes {list(seen.teardown.leftover_pids)} or "
                  "the port busy")
    evidence = Evidence(
        num_prompts=seen.cell.measured.num_prompts,
        completed=None if result is None else int(result.get("completed", 0)),
        failed=None if result is None else int(result.get("failed", 0)),
        client_output_tokens=None if result is None else result.get("total_output_tokens"),
        server_generation_tokens=delta.total(metrics.GENERATION_TOKENS) if delta else None,
        preemptions=delta.total(metrics.PREEMPTIONS) if delta else None,
        fatal_lines=seen.fatal_lines, errors=tuple(errors),
        lossless=None if seen.lossless is None else lossless_reason(
            Comparison.from_dict(seen.lossless.get("comparison")), seen.lossless))
    reasons = judge(evidence)
    spec_dict = spec.as_dict() if spec else None
    return CellRecord(
        arm=seen.cell.arm, prefix_caching=seen.cell.prefix_caching,
        concurrency=seen.cell.concurrency, valid=not reasons,
        reasons=reasons, protocol=protocol, repeat=seen.cell.repeat,
        accepted_per_draft=_per_draft(spec_dict), latency_ms=latency_ms(result),
        output_throughput=None if result is None else result.get("output_throughput"),
        request_throughput=None if result is None else result.get("request_throughput"),
        total_output_tokens=evidence.client_output_tokens,
        acceptance_length=None if spec_dict is None else spec_dict["mean_acceptance_length"],
        boot_s=None if seen.boot_s is None else round(seen.boot_s, 3),
        finished_at=seen.finished_at, teardown=seen.teardown, lossless=seen.lossless,
        degraded=seen.degraded, engagement=seen.engagement, draft_params=seen.draft_params,
        goodput=gp.measure(result, protocol.objectives)
        if result is not None and protocol.objectives is not None else None,
        evidence={
            "completed": evidence.completed, "failed": evidence.failed,
            "per_position_acceptance": None if spec is None or not spec.drafts else
            [round(a / spec.drafts, 4) for a in spec.accepted_per_position],
            "spec_decode": spec_dict,
            "metrics_delta": None if delta is None else _delta(delta),
            "timings": seen.timings.to_dict(),
            "phases": [_phase(p) for p in seen.phases],
            "loadgen": None if result is None else scalars(result),
            "fatal_lines": list(seen.fatal_lines),
            **carried,
            "started_at": seen.started_at,
        })


@dataclass(frozen=True)
class Evidence:
    """What a cell observed; None where it could not be observed (that alone is a reason)."""

    num_prompts: int
    completed: int | None = None
    failed: int | None = None
    client_output_tokens: int | None = None
    server_generation_tokens: float | None = None  # delta over the measured phase
    preemptions: float | None = None  # delta over the measured phase
    fatal_lines: tuple[str, ...] = ()  # "pattern: line"
    errors: tuple[str, ...] = ()  # a phase or the server that failed outright
    lossless: str | None = None  # why the greedy answers fail the lossless check


def judge(ev: Evidence) -> tuple[str, ...]:
    """Every broken rule, in a stable order; empty means valid."""
    reasons = list(ev.errors)
    if ev.completed is None:
        reasons.append("no load-generator result for the measured phase")
    else:
        if ev.failed:
            reasons.append(f"{ev.failed} of {ev.num_prompts} requests failed")
        if ev.completed != ev.num_prompts:
            reasons.append(f"{ev.completed} of {ev.num_prompts} requests completed")
    if ev.server_generation_tokens is None or ev.preemptions is None:
        reasons.append("server counters (/metrics) unavailable around the measured phase")
    else:
        if ev.client_output_tokens is not None and round(ev.server_generation_tokens) != (
            ev.client_output_tokens
        ):
            reasons.append(
                f"client counted {ev.client_output_tokens} generated tokens, server "
                f"{round(ev.server_generation_tokens)} (vllm:generation_tokens_total delta)"
            )
        if ev.preemptions:
            reasons.append(
                f"{round(ev.preemptions)} preemptions (vllm:num_preemptions_total delta)"
            )
    reasons.extend(f"fatal server log line: {line}" for line in ev.fatal_lines)
    if ev.lossless:
        reasons.append(ev.lossless)
    return tuple(reasons)


def adaptive_reasons(asked: bool, fallbacks: Sequence[str],
                     draft_params: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Why a cell that asked for adaptive verification ran without it (empty: no sign);
    `fallbacks` are the cell's `logs.fallbacks` lines ("family: line")."""
    if not asked:
        return ()
    reasons = [f"adaptive verification asked for, but the log shows {line.strip()}"
               for line in fallbacks]
    if draft_params is not None and draft_params.get("params") is not None and (
            draft_params.get("ok") is False):
        reasons.append("adaptive verification asked for, but "
                       f"{draft_params.get('sentence')}: without its confidence head vLLM "
                       "uses its online acceptance estimator")
    return tuple(reasons)


def acceptance_flag(spec: Mapping[str, Any] | None,
                    floor: float | None) -> dict[str, Any] | None:
    """The cell's acceptance against the floor; None where nothing was drafted or no floor."""
    if floor is None or not spec or not spec.get("draft_tokens"):
        return None
    rate = float(spec["accepted"]) / float(spec["draft_tokens"])
    low = rate <= floor
    sentence = (f"acceptance rate {rate:.4f} is at or below watch.min_acceptance {floor:g}: "
                "the drafter runs and accepts (almost) nothing" if low else
                f"acceptance rate {rate:.4f} above watch.min_acceptance {floor:g}")
    return {"rate": round(rate, 4), "floor": floor, "flagged": low, "sentence": sentence}
