"""verify-checkpoint's work and output are bounded by the files on disk, not by what config.json
claims: a stage count of 10**9 gives one problem per gap between the stages present, and
problems of one kind beyond LISTED_PER_CODE become one summary that counts them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoint_factory import INDEX, build_checkpoint, rewrite_json

from dspark_cli.checkpoint.head import stage_gaps
from dspark_cli.checkpoint.result import LISTED_PER_CODE
from dspark_cli.checkpoint.verify import verify_checkpoint
from tests.conftest import run_dspark

HUGE = 10**9


def dspark_json(root: Path, cwd: Path) -> tuple[int, str]:
    # The timeout only keeps a regression from hanging the suite; the asserts are on sizes.
    done = run_dspark("verify-checkpoint", "model=local", f"model.path={root}", "--json",
                      cwd=cwd)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout


@pytest.mark.parametrize("key", ["n_mtp_layers", "num_hidden_layers", "hidden_size",
                                 "vocab_size", "draft_vocab_size", "dspark_markov_rank"])
def test_a_huge_count_in_config_json_gives_a_small_report(tmp_path: Path, key: str) -> None:
    root = build_checkpoint(tmp_path / "ckpt")
    rewrite_json(root / "config.json", lambda c: c.update({key: HUGE}))
    code, out = dspark_json(root, tmp_path)
    report = json.loads(out)
    assert len(out) < 20_000
    assert len(report["problems"]) <= 2 * LISTED_PER_CODE
    if key == "n_mtp_layers":
        assert code == 1
        [gap] = [p for p in report["problems"] if p["code"] == "mtp-stage-missing"]
        assert gap["subject"] == f"mtp.3.* .. mtp.{HUGE - 1}.*"
        assert gap["actual"] == f"none for {HUGE - 3:,} stages"


def test_stage_gaps_are_one_problem_each() -> None:
    assert stage_gaps([0, 2, 5], HUGE) == [(1, 1), (3, 4), (6, HUGE - 1)]
    assert stage_gaps([0, 1, 2], 3) == []
    assert stage_gaps([7], 3) == [(0, 2)]  # a stage beyond the declared count is not a gap


def test_many_problems_of_one_kind_are_summarized_with_a_count(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path / "ckpt")
    shard = "model-00001-of-00003.safetensors"
    extra = 5000
    rewrite_json(root / INDEX, lambda i: i["weight_map"].update(
        {f"model.ghost.{n}.weight": shard for n in range(extra)}))
    report = verify_checkpoint(root)
    missing = [p for p in report.problems if p.code == "tensor-missing"]
    assert len(missing) == LISTED_PER_CODE + 1
    summary = missing[-1]
    assert summary.count == extra - LISTED_PER_CODE
    assert summary.subject == f"{extra - LISTED_PER_CODE:,} more like the above"
    assert report.count_of(report.problems) >= extra
    data = report.to_dict()
    assert data["problem_count"] == report.count_of(report.problems)
    assert len(json.dumps(data)) < 20_000


def test_a_huge_value_in_config_json_is_cut_in_the_report(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path / "ckpt")
    rewrite_json(root / "config.json", lambda c: c.update(dspark_target_layer_ids="x" * 10**6))
    code, out = dspark_json(root, tmp_path)
    assert code == 1
    assert len(out) < 20_000
    [bad] = [p for p in json.loads(out)["problems"] if p["subject"] == "dspark_target_layer_ids"]
    assert bad["actual"].endswith("(1,000,000 characters)")
