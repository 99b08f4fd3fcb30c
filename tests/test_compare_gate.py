"""`dspark compare`'s gate is a contract (compare.py): the margin is the
caller's (`--margin`, never a record's); the gate fails when B lacks a valid cell A has, when
every cell of B is invalid, when no cell is shared; runs of other models, request sets or
protocols are refused (exit 2); every protocol change is listed; the summaries are recomputed
from the cells (an edited summary.json changes nothing). Real records on disk
(tests/report_factory.py), the real CLI."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_dspark
from tests.report_factory import bench_run


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gate")
    bench_run(root / "a", repeats=2, seed=1)
    bench_run(root / "b", repeats=2, seed=2)
    bench_run(root / "slower", repeats=2, seed=2, scale=0.8)
    return root


@pytest.fixture
def runs(pristine: Path, tmp_path: Path) -> Path:
    shutil.copytree(pristine, tmp_path / "runs")
    return tmp_path / "runs"


def cells(run: Path, change: Callable[[dict[str, Any]], None],
          only: Callable[[Path], bool] = lambda p: True) -> None:
    for path in sorted((run / "cells").glob("*/cell.json")):
        if only(path):
            data = json.loads(path.read_text())
            change(data)
            path.write_text(json.dumps(data))


def compare(a: Path, b: Path, *flags: str) -> tuple[int, dict[str, Any] | None, str]:
    done = run_dspark("compare", str(a), str(b), "--json", *flags, timeout=120)
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr, done.stderr
    out = json.loads(done.stdout) if done.returncode in (0, 1) else None
    return done.returncode, out, done.stderr


def invalid(data: dict[str, Any]) -> None:
    data["valid"], data["reasons"] = False, ["planted: server died"]


def test_every_cell_of_b_invalid_fails_the_gate(runs: Path) -> None:
    cells(runs / "b", invalid)
    rc, out, err = compare(runs / "a", runs / "b")
    assert rc == 1, err
    assert not out["passed"] and out["slower"] == []
    assert "no cell of A was measured validly in both runs: nothing was compared" \
        in out["failures"]
    assert all(c["fails_gate"] and c["note"] == "no valid repeat in B (A has one)"
               for c in out["cells"])


def test_a_cell_b_lacks_fails_the_gate(runs: Path) -> None:
    for path in (runs / "b" / "cells").glob("dspark_adaptive-c64-*"):
        shutil.rmtree(path)
    rc, out, err = compare(runs / "a", runs / "b")
    assert rc == 1, err
    assert out["failures"] == ["dspark_adaptive c64 (output_throughput): not in B (A measured "
                               "it)"]
    assert out["only_in"]["a"] == ["dspark_adaptive c64"]
    done = run_dspark("compare", str(runs / "a"), str(runs / "b"), timeout=120)
    assert done.stdout.splitlines()[-1] == (
        "gate: FAILED: not judged: dspark_adaptive c64 (output_throughput: not in B (A "
        "measured it))")


def test_no_shared_cell_fails_the_gate(runs: Path) -> None:
    def shift(data: dict[str, Any]) -> None:
        data["concurrency"] += 1
        data["protocol"]["concurrencies"] = [c + 1 for c in data["protocol"]["concurrencies"]]
    cells(runs / "b", shift)
    rc, out, err = compare(runs / "a", runs / "b")
    assert rc == 1, err
    assert not any(c["verdict"] for c in out["cells"])
    assert "nothing was compared" in out["failures"][-1]


def test_the_margin_is_the_callers_never_a_records(runs: Path) -> None:
    """B's records claim a 50% margin (which would call its 0.8x cells comparable): the
    gate judges by --margin (default 5%), and a record's margin is not read."""
    cells(runs / "slower", lambda d: d["protocol"].__setitem__("equivalence_margin", 0.5))
    rc, out, err = compare(runs / "a", runs / "slower")
    assert rc == 1 and out["margin"] == 0.05, err
    assert out["slower"]
    rc, out, err = compare(runs / "a", runs / "slower", "--margin", "0.3")
    assert rc == 0 and out["margin"] == 0.3 and out["slower"] == [], err


@pytest.mark.parametrize("margin", ["-0.1", "1", "1.5", "nan", "inf"])
def test_a_margin_out_of_range_is_exit_2(runs: Path, margin: str) -> None:
    rc, _, err = compare(runs / "a", runs / "b", f"--margin={margin}")
    assert rc == 2 and "out of range" in err and err.startswith("dspark: "), err
    assert not (runs / "b" / "compare.json").exists()


@pytest.mark.parametrize("what", ["model", "dataset", "protocol"])
def test_runs_of_other_models_request_sets_or_protocols_are_refused(runs: Path,
                                                                    what: str) -> None:
    def change(data: dict[str, Any]) -> None:
        if what == "model":
            data.setdefault("launch", {}).setdefault("plan", {})["model_path"] = "/models/other"
        elif what == "dataset":
            data["dataset"]["sha256"] = "6" * 64
        else:
            data["protocol"]["name"] = "another_protocol"
    cells(runs / "b", change)
    rc, _, err = compare(runs / "a", runs / "b")
    assert rc == 2, err
    words = {"model": "different models", "dataset": "different request sets",
             "protocol": "different protocols"}[what]
    assert f"do not belong together: {words}" in err
    assert not (runs / "b" / "compare.json").exists()


def test_every_protocol_change_is_listed(tmp_path: Path) -> None:
    """Three repeats against two, and an arm left out: bench.repeats and bench.arms are
    among the changes (the protocol as the cells recorded it, and each arm's config)."""
    a = bench_run(tmp_path / "a", repeats=2, seed=1)
    b = bench_run(tmp_path / "b", repeats=3, seed=2)
    rc, out, err = compare(a, b)
    assert rc in (0, 1), err
    changed = {c["key"]: (c["a"], c["b"]) for c in out["changes"]}
    assert changed["protocol.repeats"] == (2, 3)
    assert changed["config.none.bench.repeats"] == (2, 3)
    cells(b, lambda d: d["protocol"].__setitem__("arms", ["none", "dspark_fixed"]))
    rc, out, err = compare(a, b)
    changed = {c["key"]: (c["a"], c["b"]) for c in out["changes"]}
    assert changed["protocol.arms"] == (["none", "dspark_fixed", "dspark_adaptive"],
                                        ["none", "dspark_fixed"])


def test_a_stale_summary_is_never_shown_over_invalid_cells(runs: Path) -> None:
    """B's summary.json says every cell was valid and fast; its cells say invalid: compare
    recomputes from the cells (and fails), and `bench --report` rewrites the summary."""
    cells(runs / "b", invalid)
    summary = json.loads((runs / "a" / "summary.json").read_text())
    (runs / "b" / "summary.json").write_text(json.dumps(summary))
    rc, out, _ = compare(runs / "a", runs / "b")
    assert rc == 1 and not out["passed"]
    done = run_dspark("bench", "--report", str(runs / "b"), "--json", timeout=600)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["counts"]["valid"] == 0
    assert json.loads((runs / "b" / "summary.json").read_text())["counts"]["valid"] == 0


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict | list) and node:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        return [leaf for k, v in items for leaf in _leaves(v, (*path, k))]
    return [path]


def test_every_field_of_the_cells_edited_is_a_result_or_a_usage_error(runs: Path) -> None:
    """Every field of B's cell records set to null, text or a list (in every cell, as one
    careless edit would): compare ends with a comparison or a UsageError (exit 2), never
    another exception (exit 70)."""
    from dspark_cli.compare import compare_runs, render
    from dspark_cli.errors import UsageError

    paths = sorted((runs / "b" / "cells").glob("*/cell.json"))
    texts = {p: p.read_text() for p in paths}
    fields = _leaves(json.loads(texts[paths[0]]))
    assert len(fields) > 40
    outcomes = {"compared": 0, "refused": 0}
    for field in fields:
        for value in (None, "x", []):
            for p in paths:
                data = json.loads(texts[p])
                node = data
                for step in field[:-1]:
                    node = node.get(step) if isinstance(node, dict) else None
                if isinstance(node, dict | list) and node:  # where this cell has the field
                    node[field[-1]] = value
                p.write_text(json.dumps(data))
            try:
                render(compare_runs(runs / "a", runs / "b"))
                outcomes["compared"] += 1
            except UsageError:
                outcomes["refused"] += 1
    assert outcomes["compared"] and outcomes["refused"]
