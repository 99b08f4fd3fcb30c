"""Summary, CSV, table, plot and the report merge: invalid cells never enter a speedup."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dspark_cli.bench import records
from dspark_cli.bench.cell import CellRecord
from dspark_cli.bench.records import merge
from dspark_cli.bench.render import table
from dspark_cli.bench.stats import Speedup, Verdict, mean_interval, results_sentence
from dspark_cli.bench.summary import summarize
from dspark_cli.errors import UsageError

PROTOCOL = {"name": "t", "arms": ["none", "fixed", "adaptive"], "baseline": "fixed",
            "concurrencies": [64, 4]}


def cell(arm: str, c: int, tps: float, valid: bool = True, **extra: Any) -> dict[str, Any]:
    return {"arm": arm, "concurrency": c, "valid": valid,
            "reasons": [] if valid else ["2 preemptions (vllm:num_preemptions_total delta)"],
            "output_throughput": tps, "request_throughput": tps / 100,
            "total_output_tokens": 1000, "acceptance_length": 3.1, "boot_s": 30.0,
            "protocol": PROTOCOL, "finished_at": "2026-01-01T00:00:00+00:00", **extra}


def summary_of(cells: list[dict[str, Any]]):
    return summarize([CellRecord.from_dict(c) for c in cells], protocol="t",
                     arms=PROTOCOL["arms"], baseline="fixed",
                     concurrencies=PROTOCOL["concurrencies"])


def speedups(s) -> dict[tuple[str, int], float | None]:
    return {(x.arm, x.concurrency): x.speedup for x in s.speedups}


def test_speedups_are_over_the_baseline_at_the_same_concurrency() -> None:
    s = summary_of([cell("none", 64, 500), cell("fixed", 64, 1000), cell("adaptive", 64, 1700),
                    cell("none", 4, 100), cell("fixed", 4, 200), cell("adaptive", 4, 190)])
    assert speedups(s) == {("none", 64): 0.5, ("adaptive", 64): 1.7,
                           ("none", 4): 0.5, ("adaptive", 4): pytest.approx(0.95)}
    assert [(c.arm, c.concurrency) for c in s.cells][:3] == [
        ("none", 64), ("fixed", 64), ("adaptive", 64)]
    assert s.mean_speedup["adaptive"] == pytest.approx(math.sqrt(1.7 * 0.95))


def test_an_invalid_cell_enters_no_speedup_and_no_average() -> None:
    s = summary_of([cell("fixed", 64, 1000), cell("adaptive", 64, 9999, valid=False),
                    cell("fixed", 4, 200, valid=False), cell("adaptive", 4, 300)])
    sp = {(x.arm, x.concurrency): (x.speedup, x.note) for x in s.speedups}
    assert sp[("adaptive", 64)] == (None, "cell invalid")
    assert sp[("adaptive", 4)] == (None, "baseline cell invalid")
    assert sp[("none", 4)] == (None, "cell not run")
    assert s.mean_speedup["adaptive"] is None
    bad = next(c for c in s.cells if c.arm == "adaptive" and c.concurrency == 64)
    assert not bad.valid and bad.speedup is None and bad.reasons


def test_files_table_and_plot(tmp_path: Path) -> None:
    for rec in [cell("none", 64, 500), cell("fixed", 64, 1000), cell("adaptive", 64, 1500),
                cell("none", 4, 100), cell("fixed", 4, 200), cell("adaptive", 4, 0, valid=False)]:
        d = records.cell_dir(tmp_path, f"{rec['arm']}-c{rec['concurrency']}")
        d.mkdir(parents=True)
        (d / records.CELL_JSON).write_text(json.dumps(rec))
    rep = merge(tmp_path)
    data = json.loads(rep.summary_json.read_text())
    assert data["counts"] == {"cells": 6, "valid": 5, "invalid": 1, "degraded": 0}
    assert {(c["arm"], c["concurrency"]) for c in data["cells"]} == {
        (a, c) for a in PROTOCOL["arms"] for c in (64, 4)}
    first = data["cells"][0]
    assert {"arm", "concurrency", "valid", "reasons", "output_throughput"} <= first.keys()
    assert {(s["arm"], s["concurrency"]): s["speedup"] for s in data["speedups"]}[
        ("adaptive", 64)] == 1.5
    rows = list(csv.DictReader(rep.summary_csv.open()))
    assert len(rows) == 6 and rows[2]["speedup"] == "1.5"
    assert "preemptions" in next(r for r in rows if r["valid"] == "False")["reasons"]
    png = rep.plot_png.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    from rich.console import Console

    console = Console(record=True, width=160)
    console.print(table(rep.summary))
    text = console.export_text()
    assert "1.500x" in text and "NO" in text and "preemptions" in text


def test_report_merges_multirun_jobs_and_prefers_the_valid_retry(tmp_path: Path) -> None:
    jobs = [cell("fixed", 4, 200), cell("adaptive", 4, 50, valid=False),
            cell("adaptive", 4, 260, finished_at="2026-01-02T00:00:00+00:00")]
    for n, rec in enumerate(jobs):
        d = tmp_path / str(n) / "cells" / f"{rec['arm']}-c4"
        d.mkdir(parents=True)
        (d / "cell.json").write_text(json.dumps(rec))
    rep = merge(tmp_path)
    assert [(c.arm, c.valid) for c in rep.summary.cells] == [("fixed", True), ("adaptive", True)]
    assert speedups(rep.summary)[("adaptive", 4)] == pytest.approx(1.3)
    assert (tmp_path / "summary.png").is_file()


def test_report_refuses_mixed_protocols_and_empty_dirs(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="No cell records"):
        merge(tmp_path)
    for n, name in enumerate(["a", "b"]):
        d = tmp_path / str(n)
        d.mkdir()
        (d / "cell.json").write_text(json.dumps(cell("fixed", 4, 1, protocol={
            **PROTOCOL, "name": name})))
    with pytest.raises(UsageError, match="mix protocols"):
        merge(tmp_path)


def test_a_foreign_json_named_cell_json_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "cell.json").write_text("{}")
    with pytest.raises(UsageError, match=r"cell\.json: arm is missing; the record is malformed"):
        merge(tmp_path)


def test_resume_bookkeeping(tmp_path: Path) -> None:
    d = records.cell_dir(tmp_path, "fixed-c4")
    d.mkdir(parents=True)
    (d / "cell.json").write_text(json.dumps(cell("fixed", 4, 1, valid=False)))
    assert records.finished_valid(tmp_path, "fixed-c4") is None
    moved = records.set_aside(tmp_path, "fixed-c4")
    assert moved == d.with_name("fixed-c4.attempt1") and (moved / "cell.json").is_file()
    d.mkdir()
    (d / "cell.json").write_text(json.dumps(cell("fixed", 4, 1)))
    assert records.finished_valid(tmp_path, "fixed-c4") is not None
    assert records.set_aside(tmp_path, "fixed-c4") == d.with_name("fixed-c4.attempt2")


@given(st.lists(st.tuples(st.sampled_from(PROTOCOL["arms"]), st.sampled_from([64, 4]),
                          st.floats(1, 1e5), st.booleans()), max_size=12))
def test_property_no_speedup_or_average_ever_uses_an_invalid_cell(
        raw: list[tuple[str, int, float, bool]]) -> None:
    recs = list({(a, c): cell(a, c, t, valid=v) for a, c, t, v in raw}.values())
    s = summary_of(recs)
    by_key = {(r["arm"], r["concurrency"]): r for r in recs}
    for sp in s.speedups:
        mine, base = by_key.get((sp.arm, sp.concurrency)), by_key.get(("fixed", sp.concurrency))
        if sp.speedup is None:
            assert sp.note
        else:
            assert mine["valid"] and base["valid"]
            assert sp.speedup == mine["output_throughput"] / base["output_throughput"]
    for arm, mean in s.mean_speedup.items():
        used = [x.speedup for x in s.speedups if x.arm == arm and x.speedup is not None]
        assert (mean is None) == (not used)


# ---- repeats: each repeat its own record; the summary aggregates them ----

REPEATED = {**PROTOCOL, "repeats": 3, "equivalence_margin": 0.05}
LAT = {"ttft": {"p50": 10.0, "p90": 15.0, "p99": 20.0}, "tpot": {"p50": 4.0, "p99": 6.0},
       "itl": {"p50": 3.0, "p99": 9.0}}


def repeat(arm: str, c: int, r: int, tps: float, valid: bool = True,
           spec: tuple[int, int] | None = None, scale: float = 1.0) -> dict[str, Any]:
    """A repeat's record; `spec` is (drafts, accepted); latency scaled by `scale`."""
    per_draft = None if spec is None else spec[1] / spec[0]
    return cell(arm, c, tps, valid=valid, repeat=r, protocol=REPEATED,
                acceptance_length=None if spec is None else 1 + per_draft,
                accepted_per_draft=per_draft,
                latency_ms={m: {p: v * scale for p, v in ps.items()} for m, ps in LAT.items()})


def repeated_summary(cells: list[dict[str, Any]]):
    return summarize([CellRecord.from_dict(c) for c in cells], protocol="t",
                     arms=PROTOCOL["arms"], baseline="fixed",
                     concurrencies=PROTOCOL["concurrencies"], repeats=3,
                     equivalence_margin=0.05)


def test_repeats_aggregate_into_intervals_acceptance_latency_and_verdicts() -> None:
    s = repeated_summary([
        repeat("fixed", 64, 1, 1000.0), repeat("fixed", 64, 2, 1010.0),
        repeat("fixed", 64, 3, 990.0),
        repeat("adaptive", 64, 3, 1320.0, spec=(100, 250), scale=3.0),
        repeat("adaptive", 64, 1, 1300.0, spec=(100, 200), scale=1.0),
        repeat("adaptive", 64, 2, 1280.0, spec=(100, 300), scale=2.0),
        repeat("fixed", 4, 1, 200.0), repeat("fixed", 4, 2, 202.0), repeat("fixed", 4, 3, 198.0),
        repeat("adaptive", 4, 1, 199.0), repeat("adaptive", 4, 2, 203.0),
        repeat("adaptive", 4, 3, 900.0, valid=False),
    ])
    adaptive = s.result("adaptive", 64)
    assert adaptive.repeats == (1, 2, 3) and adaptive.throughputs == (1300.0, 1280.0, 1320.0)
    assert adaptive.throughput == mean_interval([1300.0, 1280.0, 1320.0])
    assert adaptive.acceptance_length == pytest.approx(3.5)  # 1 + mean(2, 3, 2.5)
    assert adaptive.accepted_per_draft == pytest.approx(2.5)
    assert adaptive.latency_ms["ttft"] == {"p50": 20.0, "p90": 30.0, "p99": 40.0}
    assert adaptive.latency_ms["itl"]["p99"] == pytest.approx(18.0)

    fast = s.speedup("adaptive", 64)
    assert fast.result.verdict is Verdict.FASTER and fast.note == ""
    assert fast.result.ratio.estimate == pytest.approx(1.3)
    assert fast.result.ratio.n == 3
    # An invalid repeat stays out of the interval and is said so; the rest still count.
    level = s.speedup("adaptive", 4)
    assert level.result.verdict is Verdict.COMPARABLE
    assert s.result("adaptive", 4).throughputs == (199.0, 203.0)
    assert level.result.ratio.n == 2 and level.note == "1 of 3 arm repeats invalid"
    # Rows per repeat, concurrency-major then by repeat; each carries its group's ratio.
    assert [(c.arm, c.repeat) for c in s.cells][:6] == [
        ("fixed", 1), ("fixed", 2), ("fixed", 3), ("adaptive", 1), ("adaptive", 2),
        ("adaptive", 3)]
    assert {c.speedup for c in s.cells if (c.arm, c.concurrency) == ("adaptive", 64)} == {
        fast.speedup}
    assert [c.cell_id for c in s.cells][:2] == ["fixed-c64-r1", "fixed-c64-r2"]
    assert s.results_sentence == results_sentence([fast.result, level.result])
    assert "adaptive over fixed: comparable at concurrency 4" in s.results_sentence
    assert "faster at concurrency 64" in s.results_sentence


def test_summary_json_carries_the_contract(tmp_path: Path) -> None:
    for rec in [repeat("fixed", 4, r, 200.0 + r) for r in (1, 2, 3)] + [
            repeat("adaptive", 4, r, 260.0 + r, spec=(10, 20)) for r in (1, 2, 3)]:
        d = records.cell_dir(tmp_path, f"{rec['arm']}-c4-r{rec['repeat']}")
        d.mkdir(parents=True)
        (d / records.CELL_JSON).write_text(json.dumps(rec))
    rep = merge(tmp_path)
    data = json.loads(rep.summary_json.read_text())
    assert (data["repeats"], data["equivalence_margin"]) == (3, 0.05)
    res = {(r["arm"], r["concurrency"]): r for r in data["results"]}
    assert res[("adaptive", 4)]["throughputs"] == [261.0, 262.0, 263.0]
    assert res[("adaptive", 4)]["throughput"] == mean_interval([261.0, 262.0, 263.0]).to_dict()
    assert res[("adaptive", 4)]["acceptance_length"] == 3.0
    assert res[("adaptive", 4)]["accepted_per_draft"] == 2.0
    assert res[("adaptive", 4)]["latency_ms"]["tpot"] == {"p50": 4.0, "p99": 6.0}
    sp = next(x for x in data["speedups"] if (x["arm"], x["concurrency"]) == ("adaptive", 4))
    assert Speedup.from_dict(sp) == rep.summary.speedup("adaptive", 4).result
    assert sp["verdict"] == "faster" and sp["baseline"] == "fixed"
    assert data["results_sentence"].startswith("adaptive over fixed: faster at concurrency 4")
    none = next(x for x in data["speedups"] if x["arm"] == "none")
    assert (none["note"], none["verdict"], none["speedup"], none["ratio"]) == (
        "cell not run", "inconclusive", None, None)
    assert set(none) == set(sp)
    rows = list(csv.DictReader(rep.summary_csv.open()))
    assert [(r["arm"], r["repeat"]) for r in rows] == [
        ("fixed", "1"), ("fixed", "2"), ("fixed", "3"), ("adaptive", "1"), ("adaptive", "2"),
        ("adaptive", "3")]
    assert rows[3]["ttft_p99_ms"] == "20.0" and rows[3]["accepted_per_draft"] == "2.0"


def test_report_refuses_records_of_different_margins(tmp_path: Path) -> None:
    for n, margin in enumerate([0.05, 0.1]):
        d = tmp_path / str(n)
        d.mkdir()
        (d / "cell.json").write_text(json.dumps(cell("fixed", 4, 1, protocol={
            **PROTOCOL, "equivalence_margin": margin})))
    with pytest.raises(UsageError, match="equivalence margins"):
        merge(tmp_path)


def test_an_old_cell_record_loads_as_one_repeat_with_its_kept_evidence() -> None:
    old = cell("adaptive", 4, 300.0)  # written before repeats: no repeat, latency, per draft
    old["spec_decode"] = {"drafts": 40, "draft_tokens": 120, "accepted": 90}
    old["loadgen"] = {"p50_ttft_ms": 11.0, "p99_ttft_ms": 19.0, "p99_itl_ms": 7.5,
                      "mean_ttft_ms": 12.0}
    rec = CellRecord.from_dict(old)
    assert (rec.repeat, rec.protocol.repeats, rec.protocol.equivalence_margin) == (1, 1, 0.05)
    assert rec.cell_id == "adaptive-c4"
    assert rec.accepted_per_draft == 2.25
    assert rec.latency_ms == {"ttft": {"p50": 11.0, "p99": 19.0}, "itl": {"p99": 7.5}}
    again = CellRecord.from_dict(rec.to_dict())
    assert again == rec and again.evidence["loadgen"] == old["loadgen"]


def _gpus(util: float, power: float, flags: list[str]) -> dict[str, Any]:
    """A cell's `gpus` record as machine/gpu_sampler.record writes it, for two GPUs."""
    measured = [{"gpu": str(i), "means": {"utilization_pct": util + 10 * i, "power_w": power,
                                          "sm_clock_mhz": 1980.0, "memory_used_mib": 70000.0,
                                          "temperature_c": 60.0},
                 "throttled_share": 0.0, "idle": False} for i in range(2)]
    return {"tool": "nvidia-smi", "interval_s": 0.5, "measured": measured, "flags": flags,
            "whole_run": measured, "error": None}


def test_gpu_means_and_flags_reach_the_summary_table_and_plot(tmp_path: Path) -> None:
    """Each sampled cell's GPU means (over its GPUs) are in summary.json and the table; a GPU
    that throttled or sat idle is listed in `gpu_flags`, in the table, and ringed on the plot
    (the picture differs from the same run without the flag)."""
    flag = "GPU 1 throttled in 40% of the measured phase's samples (reasons 0x4)"
    recs = [cell("none", 64, 500, gpus=_gpus(90.0, 600.0, [])),
            cell("fixed", 64, 1000, gpus=_gpus(40.0, 695.0, [flag])),
            cell("adaptive", 64, 1500), cell("fixed", 4, 200), cell("adaptive", 4, 300)]

    def run(root: Path, cells: list[dict[str, Any]]):
        for rec in cells:
            d = records.cell_dir(root, f"{rec['arm']}-c{rec['concurrency']}")
            d.mkdir(parents=True)
            (d / records.CELL_JSON).write_text(json.dumps(rec))
        return merge(root)

    rep = run(tmp_path / "flagged", recs)
    data = json.loads(rep.summary_json.read_text())
    assert data["gpu_flags"] == [{"cell_id": "fixed-c64", "flag": flag}]
    by_id = {c["cell_id"]: c["gpus"] for c in data["cells"]}
    assert by_id["fixed-c64"] == {"tool": "nvidia-smi", "gpus": 2, "means": {
        "utilization_pct": 45.0, "power_w": 695.0, "sm_clock_mhz": 1980.0,
        "memory_used_mib": 70000.0, "temperature_c": 60.0}, "flags": [flag]}
    assert by_id["none-c64"]["means"]["utilization_pct"] == 95.0
    assert by_id["adaptive-c64"] is None
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(table(rep.summary))
    text = console.export_text()
    assert "GPUs in the measured phase" in text and flag in text
    row = next(line for line in text.splitlines() if "none-c64" in line)
    assert "95.0" in row and "600.0" in row and "none" in row.split("│")[-2]
    quiet = [{**r, "gpus": {**r["gpus"], "flags": []}} if "gpus" in r else r for r in recs]
    plain = run(tmp_path / "quiet", quiet)
    assert json.loads(plain.summary_json.read_text())["gpu_flags"] == []
    assert rep.plot_png.read_bytes() != plain.plot_png.read_bytes()


def test_a_run_without_gpu_samples_shows_no_gpu_table(tmp_path: Path) -> None:
    from rich.console import Console

    s = summary_of([cell("fixed", 64, 1000), cell("adaptive", 64, 1500)])
    assert s.as_dict()["gpu_flags"] == [] and all(c.gpus is None for c in s.cells)
    console = Console(record=True, width=200)
    console.print(table(s))
    assert "GPUs in the measured phase" not in console.export_text()
