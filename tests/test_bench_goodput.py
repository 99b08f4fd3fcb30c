"""Goodput under a protocol's latency objectives and the arm to run per load: the objectives'
config, vLLM's own `--goodput` flags, the per-request count (vLLM's definition), intervals over
repeats, and winners named only where the shared verdict says faster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dspark_cli.bench import goodput, winners
from dspark_cli.bench.protocol import build_protocol
from dspark_cli.bench.records import collect
from dspark_cli.config import bench as bench_schema
from dspark_cli.config.bench import BenchConf
from dspark_cli.errors import ExitCode
from tests.conftest import compose_typed, run_dspark
from tests.report_factory import CONCURRENCIES, bench_run
from tests.test_missing_engine import broken_install

OBJ = goodput.Objectives(ttft_ms=2000, tpot_ms=80, percentile=99)


def bench_conf(*overrides: str) -> BenchConf:
    bench_schema.register()
    return compose_typed(["+hw=cpu", *overrides], config="bench").bench


def test_objectives_come_from_the_protocol_and_reach_vllms_flags() -> None:
    assert build_protocol(bench_conf("bench=cpu")).objectives is None
    proto = build_protocol(bench_conf("bench=cpu", "bench.objectives.ttft_ms=500",
                                      "bench.objectives.e2el_ms=3000"))
    assert proto.objectives == goodput.Objectives(500, None, 3000, 99.0)
    assert goodput.loadgen_flags(proto.objectives) == ["--goodput", "ttft:500", "e2el:3000",
                                                       "--save-detailed"]
    assert proto.objectives.words() == "p99 of requests within TTFT 500 ms, E2EL 3000 ms"


@pytest.mark.parametrize("objectives", [{"ttft_ms": 0}, {"tpot_ms": -1.0},
                                        {"tpot_ms": 50, "percentile": 0}])
def test_a_record_with_wrong_objectives_is_no_record(objectives: dict[str, Any]) -> None:
    """A protocol's objectives are checked by the schema; a record's are read back as
    untrusted, and one that the schema would refuse is no cell record (ValueError)."""
    with pytest.raises(ValueError, match="no latency limits"):
        goodput.Objectives.from_dict(objectives)
    assert goodput.Objectives.from_dict(OBJ.to_dict()) == OBJ
    assert goodput.Objectives.from_dict({"percentile": 99}) is None


def test_the_dry_run_passes_the_objectives_to_the_measured_phase_only(tmp_path: Path) -> None:
    done = run_dspark("bench", "bench=cpu", "+hw=cpu", "bench.concurrency=2",
                      "bench.objectives.tpot_ms=40", "--dry-run", "--commands", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("--goodput tpot:40") == 2  # two arms, one measured phase each


def result(ttfts: list[float], latencies: list[float], lens: list[int],
           errors: list[str] | None = None) -> dict[str, Any]:
    """The per-request arrays of `vllm bench serve --save-detailed` (seconds)."""
    return {"duration": 2.0, "ttfts": ttfts, "latencies": latencies, "output_lens": lens,
            "errors": errors or [""] * len(lens), "request_goodput": 1.0}


def test_a_request_is_good_within_every_objective_by_vllms_definition() -> None:
    # TPOT = (latency - TTFT) / (tokens - 1): 0.079 s, 0.081 s, a one-token request counts 0.
    r = result([1.0, 1.0, 2.5, 0.1, 0.0], [1.0 + 0.079 * 9, 1.0 + 0.081 * 9, 3.0, 0.2, 0.0],
               [10, 10, 10, 1, 0], ["", "", "", "", "boom"])
    g = goodput.measure(r, OBJ)
    assert g is not None
    assert (g.requests, g.good) == (5, 2)  # too slow per token, too late a first token, failed
    assert g.share == pytest.approx(0.4) and not g.met
    assert g.request_goodput == pytest.approx(1.0)  # the same as vLLM's own count
    assert g.output_goodput == pytest.approx(11 / 2.0)
    assert goodput.Goodput.from_dict(json.loads(json.dumps(g.to_dict()))) == g


def test_a_result_without_per_request_arrays_has_no_goodput() -> None:
    assert goodput.measure({"duration": 1.0, "latencies": [0.1]}, OBJ) is None


def test_goodput_is_aggregated_with_intervals_and_picks_the_winner(tmp_path: Path) -> None:
    from dspark_cli.bench.records import summarize_records

    summary = summarize_records(collect(bench_run(tmp_path, repeats=3, objectives=OBJ)))
    assert summary.objectives == OBJ
    r = summary.result("dspark_adaptive", 256)
    assert r is not None and r.goodput is not None and r.goodput.output_goodput.bounded
    assert r.goodput.output_goodput.estimate < r.throughput.estimate
    assert r.goodput.share.estimate == pytest.approx(1 - 0.001 * 256, abs=1e-3)
    # Adaptive carries the most good tokens everywhere; at 256 fixed K's share has collapsed.
    assert [(w.concurrency, w.arm) for w in summary.winners] == \
        [(c, "dspark_adaptive") for c in CONCURRENCIES]
    assert all(w.metric == winners.GOODPUT and w.runner_up is not None for w in summary.winners)
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["objectives"]["ttft_ms"] == 2000
    assert data["winners"][0]["arm"] == "dspark_adaptive"
    assert {tuple(sorted(x["goodput"])) for x in data["results"]} == {
        ("met", "output_goodput", "output_goodputs", "repeats", "share")}


def test_one_repeat_names_no_winner(tmp_path: Path) -> None:
    from dspark_cli.bench.records import summarize_records

    summary = summarize_records(collect(bench_run(tmp_path, repeats=1)))
    assert summary.objectives is None
    assert {w.arm for w in summary.winners} == {None}
    assert all(w.metric == winners.THROUGHPUT and "inconclusive" in w.note
               for w in summary.winners)


def test_a_winner_must_be_faster_than_every_other_arm() -> None:
    measured = [("a", 1, [100.0, 101.0, 99.0]), ("b", 1, [80.0, 81.0, 79.0]),
                ("c", 1, [99.5, 100.5, 98.5]),  # as good as a: no clear winner at 1
                ("a", 2, [100.0, 101.0, 99.0]), ("b", 2, [80.0, 81.0, 79.0]),
                ("a", 4, [50.0, 51.0, 49.0]), ("b", 4, [0.0, 0.0, 0.0])]  # b met nothing
    found = winners.pick(measured, [1, 2, 4, 8], 0.05, winners.GOODPUT)
    assert [w.arm for w in found] == [None, "a", "a", None]
    assert found[0].best == "a" and "c" in found[0].note
    assert found[1].runner_up is not None and found[1].runner_up.baseline == "b"
    assert found[3].note == "not measured"
    assert winners.pick([("a", 1, [1.0, 2.0]), ("b", 1, [])], [1], 0.05,
                        winners.GOODPUT)[0].note == "fewer than two arms with valid repeats"
    assert winners.ranges(found) == [(1, 4, "a")]


def test_ranges_follow_the_crossover() -> None:
    def w(c: int, arm: str | None) -> winners.Winner:
        return winners.Winner(c, arm, winners.THROUGHPUT, arm, None, "")

    found = [w(4, "fixed"), w(8, "fixed"), w(32, None), w(128, "adaptive"), w(256, "adaptive")]
    assert winners.ranges(found) == [(1, 8, "fixed"), (9, 256, "adaptive")]


def test_the_report_names_the_arm_per_load_the_proposal_and_the_pictures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A live bench (its own config: `Launch`) preflights its proposal; here vLLM cannot be
    imported (a real broken install, tests/test_missing_engine.py), so the preflight fails. The
    report recomputes the proposal from the cells and never calls a recorded preflight passed:
    it did not run it (the preflight that vLLM's own parser passes is test_bench_proposal's)."""
    from dspark_cli.bench.proposal_files import Launch
    from dspark_cli.bench.records import merge

    monkeypatch.setenv("PYTHONPATH", broken_install(tmp_path, "hidden")["PYTHONPATH"])
    run = bench_run(tmp_path / "run", repeats=3, objectives=OBJ)
    merged = merge(run, Launch(("+hw=cpu",), None))
    assert merged.proposal_json is not None
    found = json.loads(merged.proposal_json.read_text())
    # Adaptive wins every load: one arm, nothing to schedule; its command was preflighted.
    assert found["kind"] == "per_load" and found["ranges"] == [
        {"first": 1, "last": 256, "arm": "dspark_adaptive"}]
    assert [p["command"] for p in found["preflight"]] == found["commands"]
    assert [(p["exit"], p["passed"]) for p in found["preflight"]] == [
        (ExitCode.MISSING_ENGINE, False)] * len(found["commands"])
    for name in ("decisions.png", "pareto.png"):
        assert (run / name).stat().st_size > 10_000
    done = run_dspark("report", str(run), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    md = done.stdout
    assert "### Which configuration to run" in md
    assert "p99 of requests within TTFT 2000 ms, TPOT 80 ms" in md
    assert "| 256 | dspark\\_adaptive | faster than dspark\\_fixed" in md.replace("_", "\\_") \
        or "| 256 | dspark_adaptive | faster than" in md
    assert "**Proposal (per_load):**" in md and "A proposal to validate" in md
    assert "Preflight: not checked" in md
    assert "![Pareto: per-user vs total output tokens/s](pareto.png)" in md
    # A recorded preflight edited to "passed" is still not called passed.
    found["preflight"] = [{**p, "exit": 0, "passed": True} for p in found["preflight"]]
    merged.proposal_json.write_text(json.dumps(found))
    done = run_dspark("report", str(run), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "passed `dspark serve" not in done.stdout and "Preflight: not checked" in done.stdout
