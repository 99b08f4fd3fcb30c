"""Prefix caching on and off as an axis of the protocol (`bench.prefix_caching`), over recorded
cells in the real record format (tests/report_factory.py): the summary, the report and compare
keep the two launches of an arm apart, and the proposal names a winner with prefix caching off by
its arm plus the override. The plan and the one launch: tests/test_bench_protocol.py and
tests/test_one_launch.py."""

from __future__ import annotations

import csv
import json
import shlex
from pathlib import Path

import yaml

from dspark_cli.bench import proposal, winners
from dspark_cli.bench.records import merge
from dspark_cli.paths import conf_dir
from tests.conftest import run_dspark
from tests.report_factory import ARMS, CONCURRENCIES, bench_run

BOTH = (True, False)


def test_the_summary_keeps_each_arm_with_prefix_caching_off_apart(tmp_path: Path) -> None:
    root = bench_run(tmp_path / "run", repeats=2, prefix_caching=BOTH)
    merged = merge(root)
    data = json.loads(merged.summary_json.read_text())
    assert data["prefix_caching"] == [True, False]
    assert data["arms"] == [a + s for a in ARMS for s in ("", "+pc-off")]
    assert data["baseline"] == "dspark_fixed"
    results = {(r["arm"], r["concurrency"]): r for r in data["results"]}
    on, off = results[("dspark_adaptive", 64)], results[("dspark_adaptive+pc-off", 64)]
    assert off["throughput"]["estimate"] < on["throughput"]["estimate"]
    speedups = {(s["arm"], s["concurrency"]): s for s in data["speedups"]}
    assert speedups[("dspark_fixed+pc-off", 64)]["verdict"] == "slower"
    cells = [c for c in data["cells"] if c["cell_id"] == "dspark_adaptive+pc-off-c64-r1"]
    assert [(c["arm"], c["prefix_caching"]) for c in cells] == [("dspark_adaptive", False)]
    assert len(data["cells"]) == len(ARMS) * 2 * len(CONCURRENCIES) * 2
    rows = list(csv.DictReader(merged.summary_csv.open()))
    assert {(r["arm"], r["prefix_caching"]) for r in rows} == {
        (a, pc) for a in ARMS for pc in ("True", "False")}
    # the winner per load is a launch; prefix caching on wins here, named by its arm
    found = json.loads(merged.proposal_json.read_text())
    assert found["ranges"] == [{"first": 1, "last": 256, "arm": "dspark_adaptive"}]


def test_the_report_and_compare_show_the_axis(tmp_path: Path) -> None:
    a = bench_run(tmp_path / "a", seed=1, repeats=2)
    b = bench_run(tmp_path / "b", seed=2, repeats=2, prefix_caching=BOTH)
    for cell in (b / "cells").glob("*/cell.json"):
        data = json.loads(cell.read_text())
        data["per_position_acceptance"] = ([0.5, 0.25] if not data["prefix_caching"] else
                                           [0.8, 0.6]) if data["arm"] != "none" else None
        cell.write_text(json.dumps(data))
    out = tmp_path / "report"
    done = run_dspark("report", str(b), "--out", str(out))
    assert done.returncode == 0, done.stderr
    md = (out / "report.md").read_text()
    results = md[md.index("### Concurrency 64"):md.index("### Concurrency 32")]
    assert "| dspark_adaptive+pc-off |" in results and "| dspark_adaptive |" in results
    watches = md[md.index("### Watches"):]
    assert "| dspark_adaptive+pc-off | 64 | 0.500 / 0.250 |" in watches
    assert "| dspark_adaptive | 64 | 0.800 / 0.600 |" in watches
    done = run_dspark("compare", str(a), str(b), "--json", cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    changes = {c["key"]: c for c in json.loads(done.stdout)["changes"]}
    assert changes["protocol.prefix_caching"]["a"] == [True]
    assert changes["protocol.prefix_caching"]["b"] == [True, False]


PROFILES = {a: yaml.safe_load((conf_dir() / "speculative" / f"{a}.yaml").read_text())
            for a in ("none", "draft_model")}
VARIANTS = ["none", "none+pc-off", "draft_model", "draft_model+pc-off"]
OFF = "serving.args.enable_prefix_caching=false"


def w(c: int, arm: str) -> winners.Winner:
    return winners.Winner(c, arm, winners.THROUGHPUT, arm, None, "")


def test_a_winner_with_prefix_caching_off_is_its_arm_plus_the_override(tmp_path: Path) -> None:
    profiles = {v: PROFILES[v.split("+")[0]] for v in VARIANTS}
    mixed = proposal.propose([w(2, "draft_model+pc-off"), w(8, "none")], profiles, True,
                             ["+hw=cpu"], tmp_path, VARIANTS)
    assert mixed.kind == "per_load"  # one server cannot switch prefix caching per batch size
    assert [shlex.split(c)[2:-2] for c in mixed.commands] == [
        ["+hw=cpu", "speculative=draft_model", OFF], ["+hw=cpu", "speculative=none"]]
    assert mixed.to_dict()["ranges"] == [
        {"first": 1, "last": 2, "arm": "draft_model", "prefix_caching": False},
        {"first": 3, "last": 8, "arm": "none"}]
    off = proposal.propose([w(2, "draft_model+pc-off"), w(8, "none+pc-off")], profiles, True,
                           ["+hw=cpu"], tmp_path, VARIANTS)
    assert off.kind == "schedule" and off.schedule == ((1, 2, 3), (3, 8, 0))
    (cmd,) = off.commands
    assert shlex.split(cmd)[2:5] == ["+hw=cpu", "speculative=draft_model", OFF]
    validate = shlex.split(off.validate_command)
    assert "bench.arms=[none,draft_model,proposed]" in validate
    assert "bench.prefix_caching=[on,off]" in validate
