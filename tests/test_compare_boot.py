"""`dspark compare` flags a cold start that grew (compare.py): per arm, the median of the
cells' recorded `cold_start.boot_s` of B over A; a growth beyond `--boot-margin` (the caller's,
default 25%) is a flag in the text and compare.json, and never fails the throughput gate. Real
records on disk (tests/report_factory.py), the real CLI."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_dspark
from tests.report_factory import bench_run


def _boot(seconds: Callable[[dict[str, Any]], float]) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        boot = seconds(data)
        data["cold_start"] = {"boot_s": boot, "before_first_line_s": 2.0,
                              "phases_s": {"weights_loaded": boot / 2, "api_ready": boot}}
    return change


def cells(run: Path, change: Callable[[dict[str, Any]], None]) -> None:
    for path in sorted((run / "cells").glob("*/cell.json")):
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A and B measured the same throughput; B's dspark_adaptive boots take 1.5x A's (its
    cells' boots vary by repeat: the median is what is compared)."""
    root = tmp_path_factory.mktemp("boot")
    bench_run(root / "a", repeats=2, seed=1)
    bench_run(root / "b", repeats=2, seed=1)
    cells(root / "a", _boot(lambda d: 400.0 + 10 * d["repeat"]))
    cells(root / "b", _boot(lambda d: (1.5 if d["arm"] == "dspark_adaptive" else 1.1)
                            * (400.0 + 10 * d["repeat"])))
    return root


@pytest.fixture
def runs(pristine: Path, tmp_path: Path) -> Path:
    shutil.copytree(pristine, tmp_path / "runs")
    return tmp_path / "runs"


def compare(a: Path, b: Path, *flags: str) -> tuple[int, dict[str, Any] | None, str]:
    done = run_dspark("compare", str(a), str(b), "--json", *flags, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    out = json.loads(done.stdout) if done.returncode in (0, 1) else None
    return done.returncode, out, done.stderr


def test_a_cold_start_beyond_the_margin_is_flagged_not_gated(runs: Path) -> None:
    rc, out, err = compare(runs / "a", runs / "b")
    assert rc == 0 and out["passed"] and out["failures"] == [], err
    assert out["boot_margin"] == 0.25
    boots = {c["arm"]: c for c in out["cold_start"]}
    assert set(boots) == {"none", "dspark_fixed", "dspark_adaptive"}
    adaptive = boots["dspark_adaptive"]
    assert adaptive["a_boot_s"] == 415.0 and adaptive["b_boot_s"] == pytest.approx(622.5)
    assert adaptive["growth"] == pytest.approx(0.5) and adaptive["flagged"]
    assert adaptive["a_cells"] == adaptive["b_cells"] == 14
    assert not boots["none"]["flagged"] and boots["none"]["growth"] == pytest.approx(0.1)
    assert out["flags"] == ["dspark_adaptive: cold start 415.0 s -> 622.5 s (+50%; median over "
                            "14 and 14 cells): grew beyond the 25% boot margin"]
    text = run_dspark("compare", str(runs / "a"), str(runs / "b"), timeout=120)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "  FLAG dspark_adaptive: cold start 415.0 s -> 622.5 s (+50%; median over 14 and 14 " \
        "cells)" in lines
    assert "  none: cold start 415.0 s -> 456.5 s (+10%; median over 14 and 14 cells)" in lines
    assert lines[-1].startswith("gate: passed")


def test_the_boot_margin_is_the_callers(runs: Path) -> None:
    rc, out, err = compare(runs / "a", runs / "b", "--boot-margin", "0.05")
    assert rc == 0 and out["boot_margin"] == 0.05, err
    assert sorted(f.split(":")[0] for f in out["flags"]) == ["dspark_adaptive", "dspark_fixed",
                                                             "none"]
    rc, out, err = compare(runs / "a", runs / "b", "--boot-margin=0.6")
    assert rc == 0 and out["flags"] == [], err


def test_a_slower_run_fails_the_gate_whatever_its_boot(runs: Path, tmp_path: Path) -> None:
    """The flag sits beside the gate: a run that got slower fails, its faster boot aside."""
    bench_run(tmp_path / "slower", repeats=2, seed=1, scale=0.8)
    cells(tmp_path / "slower", _boot(lambda d: 100.0))
    rc, out, err = compare(runs / "a", tmp_path / "slower")
    assert rc == 1 and out["flags"] == [] and out["slower"], err
    assert all(c["growth"] < 0 for c in out["cold_start"])


@pytest.mark.parametrize("margin", ["-0.1", "10.5", "nan", "inf"])
def test_a_boot_margin_out_of_range_is_exit_2(runs: Path, margin: str) -> None:
    rc, _, err = compare(runs / "a", runs / "b", f"--boot-margin={margin}")
    assert rc == 2 and "--boot-margin" in err and "out of range" in err, err
    assert not (runs / "b" / "compare.json").exists()


def test_runs_without_a_recorded_cold_start_have_no_boot_finding(tmp_path: Path) -> None:
    bench_run(tmp_path / "a", repeats=2, seed=1)
    bench_run(tmp_path / "b", repeats=2, seed=1)
    rc, out, err = compare(tmp_path / "a", tmp_path / "b")
    assert rc == 0 and out["cold_start"] == [] and out["flags"] == [], err


def test_a_planted_boot_that_is_no_number_is_exit_2(runs: Path) -> None:
    cells(runs / "b", lambda d: d["cold_start"].__setitem__("boot_s", "fast"))
    rc, _, err = compare(runs / "a", runs / "b")
    assert rc == 2 and "cold_start.boot_s" in err, err
    assert not (runs / "b" / "compare.json").exists()
