"""The report's engagement rows per arm, from cell records as `dspark bench` writes them: each
cell's `engagement` is the probe's record (bench/runner.py) of answers in vLLM 0.32's
per-request metrics shape, its `draft_params` what the log showed against the pin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dspark_cli.bench.runner import engagement_record
from dspark_cli.report.evidence import engagement_rows
from dspark_cli.server.logscan import DraftParams, compile_patterns, scan_lines, seen_params
from dspark_cli.server.metrics import ADAPTIVE, FIXED, Engagement, request_steps
from tests.conftest import run_dspark
from tests.report_factory import bench_run
from tests.test_spec_metrics import body

(PATTERN,) = compile_patterns({"draft_params": r"DSpark draft model loaded: (?P<params>\d+) "
                                               "params"})


def cell(arm: str, cid: str, steps: list[tuple[int, int]] | None, expected: str | None,
         params: int | None = None) -> dict[str, Any]:
    seen = None if steps is None else Engagement.of("detailed", [request_steps(body(steps, k=7))])
    out: dict[str, Any] = {"arm": arm, "cell_id": cid,
                           "engagement": (None if expected is None
                                          else engagement_record(seen, expected))}
    if params is not None:
        log = scan_lines([f"DSpark draft model loaded: {params} params"], (), (PATTERN,))
        out["draft_params"] = seen_params(DraftParams(PATTERN, 97), log)
    return out


def test_each_arm_says_whether_its_expectation_was_seen() -> None:
    rows = {r.arm: r for r in engagement_rows([
        cell("none", "none-c4", None, None),
        cell("dspark_fixed", "dspark_fixed-c4", [(7, 3), (7, 7)], FIXED, 97),
        cell("dspark_adaptive", "dspark_adaptive-c4", [(7, 3), (4, 4)], ADAPTIVE, 97),
        cell("dspark_adaptive", "dspark_adaptive-c256", [(7, 3), (7, 1)], ADAPTIVE, 96),
    ])}
    assert set(rows) == {"dspark_fixed", "dspark_adaptive"}  # none speculates nothing
    fixed, adaptive = rows["dspark_fixed"], rows["dspark_adaptive"]
    assert fixed.outcome == "shown in 1 of 1 cell" and fixed.held == fixed.cells == 1
    assert fixed.steps == "0 of 2 steps below K=7 (1 cell)"
    assert fixed.draft_params == "97 (pinned 97) in 1 cell"
    # c256 shows no trimmed step: not credited, and not counted as a failure vLLM 0.32 could see
    assert (adaptive.cells, adaptive.held) == (1, 1)
    assert adaptive.outcome == "shown in 1 of 2 cells"
    assert adaptive.steps == "1 of 4 steps below K=7 (2 cells)"
    assert adaptive.draft_params.startswith("MISMATCH: dspark_adaptive-c256: DSpark draft "
                                            "loaded 96 params, pinned 97 (one fewer")


def test_a_cell_that_ended_before_its_probe_is_not_measured() -> None:
    (row,) = engagement_rows([cell("dspark_adaptive", "a-c4", None, ADAPTIVE)])
    assert row.cells == 0 and row.steps == "-"
    assert row.outcome == "not measured: the cell ended before its probe"


def test_an_adaptive_arm_whose_steps_all_read_k_is_not_shown_never_credited() -> None:
    (row,) = engagement_rows([cell("dspark_adaptive", "a-c4", [(7, 3), (7, 7)], ADAPTIVE, 97)])
    assert row.held == 0
    assert row.outcome.startswith("not shown: adaptive verification is configured, but no step "
                                  "was trimmed")
    assert "credits none" in row.outcome


def test_dspark_report_shows_the_rows_escaped(tmp_path: Path) -> None:
    """`dspark report` over a bench run whose DSpark cells carry what `dspark bench` records:
    the section per arm, and a server's hostile text (a probe's error) rendered inert."""
    root = bench_run(tmp_path / "bench", repeats=1)
    for path in sorted((root / "cells").glob("dspark_*/cell.json")):
        data = json.loads(path.read_text())
        adaptive = data["arm"] == "dspark_adaptive"
        steps = [(7, 3), (4, 4)] if adaptive else [(7, 3), (7, 7)]
        seen = Engagement.of("detailed", [request_steps(body(steps, k=7))],
                             ["<img src=x onerror=alert(1)> **bold**"]
                             if data["concurrency"] == 4 and adaptive else [])
        data["engagement"] = engagement_record(seen, ADAPTIVE if adaptive else FIXED)
        data["draft_params"] = cell(data["arm"], data["cell_id"], None, None, 97)["draft_params"]
        path.write_text(json.dumps(data))
    out = tmp_path / "report"
    done = run_dspark("report", str(root), "--out", str(out))
    assert done.returncode == 0, done.stderr
    md = (out / "report.md").read_text()
    section = md[md.index("### Adaptive verification seen to engage"):]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in section.splitlines()
            if line.startswith("| dspark")}
    assert set(rows) == {"dspark_fixed", "dspark_adaptive"}
    assert "shown in 7 of 7 cells" in rows["dspark_fixed"]
    assert "K every step (fixed K)" in rows["dspark_fixed"]
    assert "NOT SHOWN in dspark_adaptive-c4" in rows["dspark_adaptive"]
    assert "6 of 7" in rows["dspark_adaptive"] and "97 (pinned 97) in 7 cells" in md
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)&gt; \\*\\*bold\\*\\*" in md
    doc = json.loads((out / "report.json").read_text())
    assert [r["arm"] for r in doc["engagement"]] == ["dspark_fixed", "dspark_adaptive"]
