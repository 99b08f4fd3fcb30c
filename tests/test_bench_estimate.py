"""The bench dry run's wall-time estimate from evidence: the latest bench or smoke run on the same
hardware and model (its records read as untrusted), the configured assumption otherwise, and
only the cells a resumed run has left."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dspark_cli.bench.protocol import Protocol
from tests.conftest import run_dspark
from tests.report_factory import cell_record

CPU = ("bench", "bench=cpu", "+hw=cpu", "--dry-run", "--json")
INFO = Protocol("cpu", ("none", "draft_model"), "none", (8, 2))


def past_bench(
    root: Path, name: str, hw: str, boot_s: float, tps: float, c: int = 8, age_s: float = 0.0
) -> Path:
    """A finished bench run under root/runs/bench/NAME: one valid cell at concurrency `c`."""
    run = root / "runs" / "bench" / name
    rec = cell_record("none", c, 1, tps * c, INFO, "0" * 64).to_dict()
    rec.update(
        boot_s=boot_s,
        profiles={
            "hw": hw,
            "model": "tiny",
            "speculative": "none",
            "compilation": "eager",
            "serving": "cpu",
        },
    )
    path = run / "cells" / f"none-c{c}" / "cell.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rec))
    stamp = path.stat().st_mtime - age_s
    os.utime(path, (stamp, stamp))
    return run


def plan(cwd: Path, *extra: str) -> dict[str, Any]:
    done = run_dspark(*CPU, *extra, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["summary"]


def test_without_a_past_run_the_estimate_says_it_assumes(tmp_path: Path) -> None:
    summary = plan(tmp_path)
    assert summary["estimate_from"] is None
    assert summary["estimate_assumes"] == {"boot_s": 40.0, "tokens_per_s": 8.0}
    text = run_dspark(*CPU[:-1], cwd=tmp_path).stdout
    assert "assumes a 40 s boot" in text and "bench.estimate" in text


def test_the_latest_run_on_the_same_profile_gives_the_figures(tmp_path: Path) -> None:
    past_bench(tmp_path, "old", "cpu", 90.0, 2.0, age_s=3600)
    newest = past_bench(tmp_path, "new", "cpu", 55.0, 4.0, age_s=60)
    past_bench(tmp_path, "other-hw", "h200", 30.0, 300.0)  # newer, but another machine's
    (tmp_path / "runs" / "bench" / "broken" / "cells" / "x").mkdir(parents=True)
    (tmp_path / "runs" / "bench" / "broken" / "cells" / "x" / "cell.json").write_text("[1]")
    summary = plan(tmp_path)
    assert summary["estimate_from"] == {
        "boot_s": 55.0,
        "tokens_per_s": 4.0,
        "run": str(newest),
        "kind": "bench",
    }
    assert summary["estimate_assumes"] == {"boot_s": 55.0, "tokens_per_s": 4.0}
    assumed = plan(tmp_path / "runs")["estimate_s"]  # no runs/ below it: the assumption
    assert summary["estimate_s"] != assumed
    text = run_dspark(*CPU[:-1], cwd=tmp_path).stdout
    assert f"measured by the bench run {newest} on this profile" in text


def test_a_resumed_run_estimates_the_cells_left(tmp_path: Path) -> None:
    run = past_bench(tmp_path, "resumed", "cpu", 50.0, 5.0, c=8)
    whole = plan(tmp_path)
    left = plan(tmp_path, f"hydra.run.dir={run}")
    assert (whole["cells"], whole["estimate_cells"], left["estimate_cells"]) == (4, 4, 3)
    assert 0 < left["estimate_s"] < whole["estimate_s"]
    text = run_dspark(*CPU[:-1], f"hydra.run.dir={run}", cwd=tmp_path).stdout
    assert "for the 3 of 4 cells left to run" in text
