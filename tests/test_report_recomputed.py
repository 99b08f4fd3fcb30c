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
from pathlib import Path
from typing import Any

import pytest
import yaml

from dspark_cli.bench.proposal_files import NOT_CHECKED
from tests.conftest import run_dspark
from tests.report_factory import bench_run, edit_json, smoke_run


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


# -- verdicts are recomputed, never shown as found ------------------------------------------------
def test_the_summary_status_comes_from_the_records_not_validate_json(records: Path) -> None:
    """validate.json says every stage passed; a speculative cell is invalid and the smoke's
    draft_params check recorded 96 parameters against a pin of 97 as passed: the Summary and the
    sections say failed, each naming what validate.json said."""
    (records / "validate.json").write_text(json.dumps({"stages": [
        {"name": "smoke", "status": "passed", "detail": "all good"},
        {"name": "bench", "status": "passed", "detail": "all good"}], "exit_code": 0}))
    edit_json(records / "smoke" / "smoke.json", lambda d: [
        c.update(data={"params": 96, "expected": 97}) for c in d["checks"]
        if c["name"] == "draft_params"])
    cell = sorted((records / "bench" / "cells").glob("dspark_adaptive-*/cell.json"))[0]
    edit_json(cell, lambda d: d.update(valid=False, reasons=["edited"]))
    md = report(records).stdout
    summary = md.split("## Summary")[1].split("\n## ")[0]
    assert "| smoke | failed | 1 of 11 checks failed or did not run: draft_params" in summary
    assert "(validate.json said passed; recomputed)" in summary
    assert "| bench | failed | 62 of 63 cells valid" in summary
    assert "| draft_params | failed |" in md
    assert "A live serving smoke test (managed) FAILED" in md and "The smoke FAILED" in md
    assert "It demonstrates that the server started" not in md


def test_engagement_and_draft_parameters_are_recomputed_from_counts(records: Path) -> None:
    """A cell's record claims adaptive verification engaged with 0 of 340 steps below K, and 96
    draft parameters against a pin of 97 as ok."""
    cells = sorted((records / "bench" / "cells").glob("dspark_adaptive-*/cell.json"))
    for cell in cells:
        edit_json(cell, lambda d: d.update(
            engagement={"level": "detailed", "requests": 4, "reported": 4, "steps": 340,
                        "draft_tokens": 340 * 7, "accepted": 900, "k": 7, "short_steps": 0,
                        "trimmed_tokens": 5, "expected": "adaptive", "outcome": "trimmed",
                        "ok": True, "sentence": "adaptive verification trimmed"},
            draft_params={"params": 96, "expected": 97, "ok": True,
                          "sentence": "DSpark draft loaded 97 params (pinned 97)"}))
    md = report(records / "bench").stdout
    row = next(line for line in md.splitlines() if line.startswith("| dspark_adaptive |")
               and "steps below" in line)
    # 21 cells of 340 steps each, none below K: not credited (held to nothing), not engaged.
    assert "| 0 of 0 | 0 of 7140 steps below K=7 (21 cells) |" in row
    assert "not shown: adaptive verification is configured, but no step was trimmed" in row
    assert "MISMATCH" in row and "96 params, pinned 97 (one fewer" in row


def test_goodput_met_is_recomputed_from_the_counts_and_the_objective(tmp_path: Path) -> None:
    """An edited `"met": true` over too few good requests is recomputed from good of requests
    against the objective's percentile; `"met": "false"` (a string) is no boolean: refused by
    the reader, never counted as met."""
    from dspark_cli.bench.goodput import Objectives
    from dspark_cli.bench.records import collect, summarize_records
    from dspark_cli.untrusted import RecordError

    run = bench_run(tmp_path / "run", repeats=3, objectives=Objectives(2000, 80, None, 99))
    cells = sorted((run / "cells").glob("*/cell.json"))
    edit_json(cells[0], lambda d: d["goodput"].update(met="false"))
    with pytest.raises(RecordError, match=r"goodput\.met must be a JSON boolean"):
        collect(run)
    for cell in cells:
        edit_json(cell, lambda d: d["goodput"].update(met=True))
    summary = summarize_records(collect(run))
    for r in summary.results:
        g = r.goodput
        assert g is not None
        # SHARE_DROP: only `none` at c<=16 and the others at c<=4 keep 99% of 880 requests.
        good = 1 - {"none": 0.0005, "dspark_fixed": 0.002, "dspark_adaptive": 0.001}[r.arm] \
            * r.concurrency
        assert g.met == (3 if round(880 * good) >= 0.99 * 880 else 0), (r.arm, r.concurrency)


def test_an_accuracy_score_is_held_to_its_per_document_results(tmp_path: Path) -> None:
    from dspark_cli.accuracy import records as acc

    def arm(name: str, score: float, correct: list[int]) -> dict[str, Any]:
        return {"arm": name, "status": "scored", "score": score, "documents": list(range(10)),
                "correct": correct}

    data = {"task": "gsm8k", "baseline": "none", "margin": 0.02,
            "dataset": {"path": "/d", "sha256": "0" * 64, "documents": 10},
            "arms": [arm("none", 0.3, [0, 1, 2]), arm("draft_model", 0.9, [0, 1, 2])]}
    (tmp_path / "accuracy.json").write_text(json.dumps(data))
    record = acc.read(tmp_path / "accuracy.json", tmp_path)
    assert record is not None
    base, edited = record.arms
    assert base.status == acc.SCORED
    assert edited.status == acc.FAILED and "0.9 is not its per-document results' 3 of 10" \
        in edited.reason
    assert record.comparisons() == ()


def test_an_inconclusive_accuracy_is_not_called_passed(records: Path) -> None:
    """Both arms score 0 (a synthetic model): the comparison is inconclusive, and the Summary
    says so even where validate.json says passed."""
    accuracy = records / "accuracy"
    accuracy.mkdir()
    docs = list(range(5))
    (accuracy / "accuracy.json").write_text(json.dumps({
        "task": "gsm8k", "baseline": "dspark_fixed", "margin": 0.02,
        "dataset": {"path": "/d", "sha256": "0" * 64, "documents": 5},
        "arms": [{"arm": a, "status": "scored", "score": 0.0, "documents": docs, "correct": []}
                 for a in ("dspark_fixed", "dspark_adaptive")]}))
    (records / "validate.json").write_text(json.dumps({"stages": [
        {"name": "accuracy", "status": "passed", "detail": ""}], "exit_code": 0}))
    md = report(records).stdout
    summary = md.split("## Summary")[1].split("\n## ")[0]
    assert "| accuracy | inconclusive | dspark_adaptive vs dspark_fixed: inconclusive" \
        in summary and "(validate.json said passed; recomputed)" in summary


# -- honest reports -------------------------------------------------------------------------------
def test_a_smoke_that_found_nothing_listening_is_reported_failed(tmp_path: Path) -> None:
    """A real `dspark smoke` attached to a port nothing listens on; its report says it failed,
    and states no model or parallelism of the server it never reached."""
    from dspark_cli.server.process import free_port

    run = tmp_path / "smoke"
    done = run_dspark("smoke", "+hw=cpu", f"server.url=http://127.0.0.1:{free_port()}",
                      "server.attach_refused_s=0.5", f"hydra.run.dir={run}", cwd=tmp_path,
                      timeout=300)
    assert done.returncode == 3, done.stderr
    md = report(run).stdout
    assert "| smoke | failed |" in md and "FAILED" in md
    assert "It demonstrates that the server started" not in md
    assert "The smoke FAILED: it does not demonstrate" in md
    env = md.split("## Reproduction Environment")[1].split("\n## ")[0]
    assert "- Tensor parallel size: not known (an attached server" in env
    assert "- Local validation path: not known" in env
    assert "tiny" not in env.lower()  # the CPU default's model is no fact of that server


# -- records that do not belong together ----------------------------------------------------------
def test_bench_report_keeps_synthetic_request_sets_of_different_shapes_apart(
        records: Path) -> None:
    """Random prompts of 32 tokens and of 1024 are different request sets (no file, no sha256
    to tell them apart): one speedup over both is refused, exit 2, summary.json left as it was."""
    cells = sorted((records / "bench" / "cells").glob("*/cell.json"))
    for i, cell in enumerate(cells):
        edit_json(cell, lambda d, i=i: d.update(dataset={
            "kind": "random", "rows": None, "seed": 0,
            "input_tokens": 32 if i % 2 else 1024}))
    before = (records / "bench" / "summary.json").read_bytes()
    done = run_dspark("bench", "--report", str(records / "bench"), timeout=600)
    assert done.returncode == 2, done.stderr
    assert "do not belong together" in done.stderr and "input_tokens 1024" in done.stderr
    assert "Traceback" not in done.stderr
    assert (records / "bench" / "summary.json").read_bytes() == before
