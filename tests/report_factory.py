"""A synthetic run directory in the real record format, for the report's tests and its
rendering benchmark: the seed's protocol (3 arms x 7 concurrencies) with N repeats per cell,
each cell a real `CellRecord` (cell.json), the arms' run records (config.yaml, launch.sh,
provenance.json), a smoke record and summary.json as `dspark bench` writes it."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dspark_cli.bench.cell import CellRecord
from dspark_cli.bench.goodput import Goodput, Objectives
from dspark_cli.bench.protocol import Protocol, variant
from dspark_cli.bench.records import summarize_records
from dspark_cli.bench.summary import write
from dspark_cli.launch.plan import build_plan
from dspark_cli.launch.record import write_record
from tests.checkpoint_factory import DSV4_FLASH_QUANTIZATION

ARMS = ("none", "dspark_fixed", "dspark_adaptive")
BASELINE = "dspark_fixed"
DATASET_FILE = "/data/speed-bench/throughput_1k.jsonl"
CONCURRENCIES = (256, 128, 64, 32, 16, 8, 4)
# Output throughput per arm at concurrency 256 (tokens/s); lower concurrencies scale down.
BASE_TPUT = {"none": 5200.0, "dspark_fixed": 6100.0, "dspark_adaptive": 7300.0}
OFF_SCALE = 0.8  # an arm with prefix caching off: its throughput times this
SEED_CHECKPOINT = {
    "path": "/models/DeepSeek-V4-Flash-DSpark", "exists": True,
    "config_sha256": "6c8f3d2d3b48707541b88f32f22ef3f0f8a6b57d8523281e2b8d3cdb0ae9a023",
    "index_sha256": "98efab455cf08dfbbbaaba6f570e1bf10bf927d2b4c3c453a59c2f6f0e3be92b",
    "architecture": "DeepseekV4ForCausalLM", "name": "DeepSeek-V4-Flash-DSpark",
    "name_from": "directory", "model_type": "deepseek_v4", "expert_dtype": "fp4",
    "quantization": dict(sorted(DSV4_FLASH_QUANTIZATION.items())),
    "num_shards": 48, "total_bytes": 166878536440,
}
SEED_RUNTIME = {
    "vllm_version": "0.1.dev1+g2a02f6efe", "vllm_commit": "2a02f6efe",
    "torch": "2.12.0+rocm10.0.0", "aiter_version": "0.1.21.post2.dev2+g804648bcb",
    "aiter_commit": "804648bcbf87646ddef4b7add10da9c3b322567c",
    "aiter_wheel_sha256": "30360d15819a9c8e3ec8e4ae665683abf4c5358d5be1f49a9aa2f7962c0032db",
    "cuda": None, "rocm": "10.0.0",
}


def provenance() -> dict[str, Any]:
    gpus = [{"index": i, "name": "AMD Instinct MI350X", "arch": "gfx950"} for i in range(8)]
    return {"dspark": "0.1.0", "packages": {"torch": SEED_RUNTIME["torch"]},
            "torch_backends": {"cuda": None, "hip": "10.0.0"}, "runtime": SEED_RUNTIME,
            "python": "3.11.7", "platform": "Linux", "host": "mi350x-node",
            "time": "2026-01-01T00:00:00+00:00",
            "hardware": {"platform": "rocm", "gpus": gpus}, "checkpoint": SEED_CHECKPOINT,
            "vllm_options": {"kind": "installed", "dist": "vllm", "version": "0.1.dev1+g2a02f6efe",
                             "commit": "2a02f6efe", "note": None,
                             "described": "installed vLLM 0.1.dev1+g2a02f6efe (vllm, commit "
                             "2a02f6efe)"}}


def throughputs(arm: str, concurrency: int, repeats: int, rng: random.Random) -> list[float]:
    scale = (concurrency / 256) ** 0.6
    return [round(BASE_TPUT[arm] * scale * rng.uniform(0.98, 1.02), 3) for _ in range(repeats)]


# The seed's crossover under an objective: the share of requests within it per arm, falling
# with load faster for the arms that verify more tokens per step.
SHARE_DROP = {"none": 0.0005, "dspark_fixed": 0.002, "dspark_adaptive": 0.001}


def goodput(arm: str, concurrency: int, value: float) -> Goodput:
    share = max(0.0, 1 - SHARE_DROP[arm] * concurrency)
    good = round(880 * share)
    return Goodput(880, good, good / 860.0, value * good / 880, good / 860.0,
                   good >= 0.99 * 880)


def cell_record(arm: str, concurrency: int, repeat: int, value: float, info: Protocol,
                sha256: str, prefix_caching: bool = True) -> CellRecord:
    k = None if arm == "none" else 7
    spec = None if k is None else {"drafts": 1000, "draft_tokens": 7000, "accepted": 2600,
                                   "accepted_per_position": [900, 600, 400, 300, 200, 120, 80],
                                   "acceptance_rate": 0.3714, "mean_acceptance_length": 3.6}
    latency = {"ttft": {"p50": 812.5 + concurrency, "p99": 1990.0 + concurrency},
               "tpot": {"p50": 21.5, "p99": 30.25}, "itl": {"p50": 20.0, "p99": 61.0}}
    return CellRecord(
        arm=arm, concurrency=concurrency, valid=True, reasons=(), protocol=info,
        prefix_caching=prefix_caching,
        output_throughput=value, request_throughput=value / 1024, total_output_tokens=901120,
        acceptance_length=None if spec is None else spec["mean_acceptance_length"],
        boot_s=412.5, finished_at="2026-01-01T00:00:00+00:00", repeat=repeat,
        accepted_per_draft=None if spec is None else 2.6, latency_ms=latency,
        goodput=None if info.objectives is None else goodput(arm, concurrency, value),
        evidence={"completed": 880, "failed": 0, "spec_decode": spec,
                  "dataset": {"kind": "speed_bench", "file": DATASET_FILE, "sha256": sha256,
                              "rows": 880, "seed": 0, "input_tokens": None}})


def bench_run(root: Path, repeats: int = 3, seed: int = 0, margin: float = 0.02,
              objectives: Objectives | None = None, scale: float = 1.0,
              protocol: str = "speed_bench_throughput_1k",
              prefix_caching: tuple[bool, ...] = (True,)) -> Path:
    """A finished run of the seed's protocol under `root`: the arms' run records, every
    repeat's cell.json, and summary.json as `dspark bench` summarizes them; with `objectives`,
    each cell's goodput under them (SHARE_DROP); `scale` multiplies every throughput (a run
    that got slower), `protocol` renames it (records that do not belong together);
    `prefix_caching` (False: off) each arm's launches (OFF_SCALE: off runs slower)."""
    from dspark_cli.bench.arms import arm_config
    from dspark_cli.config import bench as schema
    from tests.conftest import compose_typed

    schema.register()
    cfg = compose_typed(["+hw=mi350x", "+image=seed_mi350x", "bench=speed_bench_throughput_1k",
                          f"bench.repeats={repeats}", f"bench.equivalence_margin={margin}",
                          "bench.dataset.sha256=" + "5" * 64], config="bench")
    for arm in ARMS:
        for pc in prefix_caching:
            arm_cfg = arm_config(cfg, arm)
            if not pc:
                arm_cfg.serving.args.enable_prefix_caching = False
            plan = build_plan(arm_cfg)
            write_record(root / "arms" / variant(arm, pc), arm_cfg, plan, list(plan.argv),
                         provenance(), [])
    info = Protocol(protocol, ARMS, BASELINE, CONCURRENCIES, repeats,
                        margin, objectives, prefix_caching)
    rng = random.Random(seed)
    records = []
    for c in CONCURRENCIES:
        for arm in ARMS:
            for pc in prefix_caching:
                for repeat, value in enumerate(throughputs(arm, c, repeats, rng), 1):
                    value = round(value * scale * (1.0 if pc else OFF_SCALE), 3)
                    record = cell_record(arm, c, repeat, value, info, "5" * 64, pc)
                    path = root / "cells" / record.cell_id / "cell.json"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(record.to_dict(), indent=2) + "\n")
                    records.append(record)
    write(summarize_records(records), root)
    return root


# The seed smoke's server log, as ROCm vLLM prints it (a fixture: no GPU here prints these).
SEED_LOG = (
    "INFO 01-01 00:00:01 [gpu_model_runner.py:40] Using V2 Model Runner",
    "INFO 01-01 00:05:10 [dspark.py:311] DSpark draft model loaded: 97 params",
    "INFO 01-01 00:05:40 [indexer.py:1035] DSA indexer decode path: use_flattening=True "
    "supports_varlen=True",
    "INFO 01-01 00:06:02 [breakable_cudagraph.py:294] Breakable CUDA graph enabled",
    "INFO 01-01 00:06:31 [api_server.py:1] Application startup complete.",
)


def smoke_run(root: Path, overrides: tuple[str, ...] = (),
              log: tuple[str, ...] = SEED_LOG) -> Path:
    """A passed smoke of the seed's deployment (K=7) under `root`, as `dspark smoke` writes it;
    its log checks are the smoke's own (`log_evidence`, `no_fatal_lines`) on `log`, scanned
    by the real scanner with the composed profile's expectations."""
    from dspark_cli.config import smoke as schema
    from dspark_cli.server.logscan import scan_lines
    from dspark_cli.smoke.checks import Boot, Observations, check_log_evidence, check_no_fatal
    from dspark_cli.smoke.expectations import expectations
    from tests.conftest import compose_typed

    schema.register()
    cfg = compose_typed(["+hw=mi350x", "+image=seed_mi350x", *overrides], config="smoke")
    plan = build_plan(cfg)
    write_record(root, cfg, plan, list(plan.argv), provenance(), [])
    (root / "server.log").write_text("\n".join(log) + "\n")
    exp = expectations(cfg)
    obs = Observations(True, Boot(True, 391.2), log=scan_lines(log, exp.fatal, exp.watch))
    scanned = [c.to_dict() for c in (check_no_fatal(exp, obs), check_log_evidence(exp, obs))]
    spec = {"drafts": 18, "draft_tokens": 126, "accepted": 29,
            "accepted_per_position": [10, 7, 5, 3, 2, 1, 1], "acceptance_rate": 0.2302,
            "mean_acceptance_length": 2.6111}
    checks = [
        ("vllm_accepts_command", "passed", "vLLM's parser and engine config accept it", {}),
        ("health", "passed", "/health 200 after 391.2 s", {"seconds": 391.2}),
        ("server_alive", "passed", "the process group was alive until teardown", {}),
        ("startup_lines", "passed", "seen: 'Application startup complete' (line 900)", {}),
        ("draft_params", "passed", "DSpark draft loaded 97 params (pinned 97)", {"params": 97}),
        ("request", "passed", "HTTP 200 in 1.41 s", {"latency_s": 1.41}),
        ("generation", "passed", "48 tokens (usage 48, vllm:generation_tokens +48)", {}),
        ("spec_decode", "passed", "18 drafts, 126 draft tokens (= 18 x K=7), 29 accepted",
         {**spec, "k": 7, "rule": "exact"}),
        ("teardown", "passed", "SIGTERM: no process left, port free after 9.2 s", {}),
    ]
    passed = all(c["status"] == "passed" for c in scanned)
    smoke = {
        "verdict": {"passed": passed, "exit_code": 0 if passed else 3,
                    "summary": f"{len(checks) + 2} checks, "
                    + ("none failed" if passed else "no_fatal_lines failed")},
        "mode": "managed", "base_url": "http://127.0.0.1:8000", "log": str(root / "server.log"),
        "profiles": {"hw": "mi350x"},
        "checks": [{"name": n, "status": s, "evidence": e, "data": d} for n, s, e, d in checks]
        + scanned,
        "timings": {}, "decided_at": 0.0,
        "request": {"state": "ok", "latency_s": 1.41, "completion_tokens": 48},
        "counters": {"generation_tokens": 48, "spec_decode": spec},
        "versions": {"server": "0.1.dev1+g2a02f6efe", **provenance()},
    }
    (root / "smoke.json").write_text(json.dumps(smoke, indent=2) + "\n")
    return root


def edit_json(path: Path, change: Callable[[Any], None]) -> None:
    """Edit a record as an operator (or an attacker) would: read, change, write back."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
