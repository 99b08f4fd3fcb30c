"""What a report shows is recomputed from the lowest-level measurements each time, never shown
as found, and merging records runs nothing: planted verdicts, overrides and code in a run
directory (tests/report_factory.py writes the real records) reach no command, no subprocess and
no claim. The real CLI, real files on disk."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dspark_cli.bench.proposal_files import NOT_CHECKED
from tests.conftest import run_dspark
from tests.report_factory import bench_run, smoke_run


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    smoke_run(root / "smoke")
    bench_run(root / "bench", repeats=3)
    return root


@pytest.fixture
def records(pristine: Path, tmp_path: Path) -> Path:
    root = tmp_path / "records"
    shutil.copytree(pristine, root, symlinks=True)
    return root


def edit_json(path: Path, change: Callable[[Any], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def report(*dirs: Path) -> subprocess.CompletedProcess[str]:
    done = run_dspark("report", *map(str, dirs), timeout=600)
    assert done.returncode == 0, done.stderr
    return done


# -- merging records runs nothing -----------------------------------------------------------------
def test_bench_report_runs_nothing_a_run_directory_plants(records: Path, tmp_path: Path) -> None:
    """The run (and its parent) carry `.hydra/overrides.yaml` setting PYTHONPATH to a folder
    whose sitecustomize.py writes a marker when any Python starts with it, and a proposal.json
    claiming a passed preflight. `bench --report` recomputes the proposal from the cells: no
    override read back, no preflight run, no marker; the report calls the preflight not
    checked."""
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "marker"
    (planted / "sitecustomize.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n")
    # The plant works: a Python started with it writes the marker.
    subprocess.run([sys.executable, "-c", "pass"], env={**os.environ, "PYTHONPATH": str(planted)},
                   check=True)
    assert marker.read_text() == "ran"
    marker.unlink()
    bench = records / "bench"
    for where in (bench, records):
        (where / ".hydra").mkdir()
        (where / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(
            ["+hw=cpu", f"+hw.env.PYTHONPATH={planted}", "model.path=/planted/model"]))
    (bench / "proposal.json").write_text(json.dumps({
        "kind": "per_load", "statement": "", "note": "planted", "ranges": [],
        "commands": ["dspark serve +hw.env.PYTHONPATH=/x --dry-run --validate"],
        "preflight": [{"command": "x", "exit": 0, "passed": True}]}))
    done = run_dspark("bench", "--report", str(bench), timeout=600)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    found = json.loads((bench / "proposal.json").read_text())
    assert found["preflight"] == NOT_CHECKED and found["note"] != "planted"
    assert found["ranges"] == [{"first": 1, "last": 256, "arm": "dspark_adaptive"}]
    assert found["commands"] == ["dspark serve speculative=dspark_adaptive --dry-run --validate"]
    assert "not read back" in found["note"]
    md = report(bench).stdout
    assert not marker.exists()
    assert f"Preflight: {NOT_CHECKED}." in md and "passed `dspark serve" not in md
    assert "planted" not in md


def test_a_planted_proposal_never_reaches_the_report(records: Path) -> None:
    """Every speculative cell invalid: the recomputed winners name no arm, so there is no
    proposal, whatever proposal.json says."""
    for cell in (records / "bench" / "cells").glob("*/cell.json"):
        if not cell.parent.name.startswith("none-"):
            edit_json(cell, lambda d: d.update(valid=False, reasons=["edited"]))
    (records / "bench" / "proposal.json").write_text(json.dumps({
        "kind": "schedule", "statement": "A proposal", "note": "xyzzy winner",
        "commands": ["dspark serve speculative=xyzzy --dry-run --validate"],
        "validate_command": "", "preflight": [{"passed": True}]}))
    md = report(records / "bench").stdout
    assert "xyzzy" not in md and "passed `dspark serve" not in md
    assert "No proposal: no load has a clear winner" in md
