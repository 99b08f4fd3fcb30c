"""The DSpark head check, fail closed: every way the heads can be missing or wrong is named,
with the tensor or key, what was expected, and how to proceed on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from checkpoint_factory import (
    INDEX,
    build_checkpoint,
    fingerprint,
    random_array,
    rewrite_json,
    rewrite_shard,
    shard_of,
)

from dspark_cli.checkpoint.result import HEAD_WAYS_OUT, Check
from dspark_cli.checkpoint.verify import verify_checkpoint

HEAD = "mtp.2.confidence_head.proj.weight"
W1 = "mtp.2.markov_head.markov_w1.weight"
W2 = "mtp.2.markov_head.markov_w2.weight"


def head_problems(root: Path) -> list[tuple[str, str]]:
    before = fingerprint(root)
    report = verify_checkpoint(root)
    assert fingerprint(root) == before
    assert not report.head_verified
    return [(p.code, p.subject) for p in report.problems_of(Check.head)]


def only_head_problem(root: Path):
    report = verify_checkpoint(root)
    [p] = report.problems_of(Check.head)
    return p


def test_clean_head_is_verified(tmp_path: Path) -> None:
    report = verify_checkpoint(build_checkpoint(tmp_path))
    assert report.head_verified and Check.head in report.checks


@pytest.mark.parametrize("dtype", ["F16", "BF16", "F32"])
def test_float_head_dtypes_pass(tmp_path: Path, dtype: str) -> None:
    assert verify_checkpoint(build_checkpoint(tmp_path, head_dtype=dtype)).head_verified


def test_head_absent_from_index_and_shards(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path, with_confidence_head=False)
    assert verify_checkpoint(root).problems_of(Check.structure) == ()
    p = only_head_problem(root)
    assert (p.code, p.subject, p.actual) == ("confidence-head-missing", HEAD, "absent")
    assert p.hint == HEAD_WAYS_OUT and "speculative=dspark_fixed" in p.hint


def test_head_listed_in_index_but_not_in_its_shard(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    shard = shard_of(root, HEAD)
    rewrite_shard(root, shard, lambda t: t.pop(HEAD))
    assert ("confidence-head-missing", HEAD) in head_problems(root)
    [p] = [p for p in verify_checkpoint(root).problems_of(Check.head)]
    assert p.actual == f"not in {shard.name}'s header"


def test_head_in_shard_but_not_in_index(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    rewrite_json(root / INDEX, lambda d: d["weight_map"].pop(HEAD))
    p = only_head_problem(root)
    assert p.code == "confidence-head-missing" and f"not in {INDEX}" in p.actual


def test_head_with_wrong_shape(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    rewrite_shard(root, shard_of(root, HEAD),
                  lambda t: t.update({HEAD: ("F32", random_array("F32", (1, 16), 0))}))
    rewrite_json(root / INDEX, lambda d: d["metadata"].update(total_size=d["metadata"][
        "total_size"] - 16))
    p = only_head_problem(root)
    assert (p.code, p.subject, p.actual) == ("confidence-head-shape", HEAD, "[1, 16]")
    assert p.expected.startswith("[1, 20]")


def test_head_with_integer_dtype(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    rewrite_shard(root, shard_of(root, HEAD),
                  lambda t: t.update({HEAD: ("I32", np.zeros((1, 20), np.int32))}))
    p = only_head_problem(root)
    assert (p.code, p.actual) == ("confidence-head-dtype", "I32")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", ["F32", "BF16"])
def test_head_with_non_finite_values(tmp_path: Path, bad: float, dtype: str) -> None:
    root = build_checkpoint(tmp_path, head_dtype=dtype)
    values = np.full((1, 20), 0.5, np.float32)
    values[0, 3] = values[0, 7] = bad
    stored = (values.view(np.uint32) >> 16).astype(np.uint16) if dtype == "BF16" else values
    rewrite_shard(root, shard_of(root, HEAD), lambda t: t.update({HEAD: (dtype, stored)}))
    p = only_head_problem(root)
    assert (p.code, p.actual) == ("confidence-head-not-finite", "2 of 20 values are NaN or inf")


def test_head_with_bias(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    bias = "mtp.2.confidence_head.proj.bias"
    shard = shard_of(root, HEAD)
    rewrite_shard(root, shard, lambda t: t.update({bias: ("F32", np.zeros(1, np.float32))}))
    rewrite_json(root / INDEX, lambda d: (d["weight_map"].update({bias: shard.name}),
                                          d["metadata"].update(total_size=d["metadata"][
                                              "total_size"] + 4)))
    p = only_head_problem(root)
    assert (p.code, p.subject) == ("confidence-head-bias", bias)
    assert "loader fails" in p.hint


@pytest.mark.parametrize(
    ("key", "code"),
    [("dspark_target_layer_ids", "dspark-key-missing"),
     ("dspark_markov_rank", "dspark-key-missing"),
     ("hidden_size", "dspark-key-missing")],
)
def test_required_key_missing(tmp_path: Path, key: str, code: str) -> None:
    root = build_checkpoint(tmp_path)
    rewrite_json(root / "config.json", lambda c: c.pop(key))
    assert (code, key) in head_problems(root)


def test_mask_token_key_missing(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    rewrite_json(root / "config.json", lambda c: c.pop("mask_token_id"))
    p = only_head_problem(root)
    assert (p.code, p.subject) == ("dspark-key-missing", "mask token")
    assert "dflash_config.mask_token_id" in p.expected


def test_nested_mask_token_key_counts(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    rewrite_json(root / "config.json", lambda c: (
        c.pop("mask_token_id"), c.update(dflash_config={"mask_token_id": 3})))
    assert verify_checkpoint(root).head_verified


@pytest.mark.parametrize("value", ["4", 0, -1, True, 2.5])
def test_markov_rank_of_wrong_type(tmp_path: Path, value: object) -> None:
    root = build_checkpoint(tmp_path)
    rewrite_json(root / "config.json", lambda c: c.update(dspark_markov_rank=value))
    assert ("dspark-key-invalid", "dspark_markov_rank") in head_problems(root)


def test_confidence_head_disabled_in_config(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    rewrite_json(root / "config.json", lambda c: c.update(enable_confidence_head=False))
    p = only_head_problem(root)
    assert (p.code, p.subject, p.actual) == (
        "confidence-head-disabled", "enable_confidence_head", "False")


def test_missing_mtp_stage(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    rewrite_json(root / "config.json", lambda c: c.update(n_mtp_layers=4))
    problems = head_problems(root)
    assert ("mtp-stage-missing", "mtp.3.*") in problems
    assert all(s != "mtp.0.*" for _, s in problems)


def test_markov_head_missing(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    shard = shard_of(root, W2)
    rewrite_shard(root, shard, lambda t: t.pop(W2))
    rewrite_json(root / INDEX, lambda d: (d["weight_map"].pop(W2), d["metadata"].update(
        total_size=d["metadata"]["total_size"] - 32 * 4 * 4)))
    assert verify_checkpoint(root).problems_of(Check.structure) == ()
    p = only_head_problem(root)
    assert (p.code, p.subject) == ("markov-head-missing", W2)


def test_markov_head_shapes_follow_config(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    rewrite_json(root / "config.json", lambda c: c.update(draft_vocab_size=48))
    p = only_head_problem(root)
    assert (p.code, p.subject, p.actual) == ("markov-head-shape", W2, "[32, 4]")
    assert p.expected.startswith("[48, 4]")


def test_rank_change_breaks_every_head_shape(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    rewrite_json(root / "config.json", lambda c: c.update(dspark_markov_rank=8))
    assert {c for c, _ in head_problems(root)} == {"confidence-head-shape", "markov-head-shape"}


def test_non_dspark_checkpoint_has_no_head_check(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path, with_confidence_head=False)
    rewrite_json(root / "config.json",
                 lambda c: [c.pop(k) for k in list(c) if k.startswith("dspark_")])
    report = verify_checkpoint(root)
    assert report.ok and not report.dspark and Check.head not in report.checks


def test_head_in_an_invalid_shard_is_unreadable(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path)
    shard = shard_of(root, HEAD)
    shard.write_bytes(shard.read_bytes()[:-1])
    problems = head_problems(root)
    assert ("head-unreadable", HEAD) in problems
    p = next(p for p in verify_checkpoint(root).problems if p.subject == HEAD)
    assert shard.name in p.actual


def test_report_json_names_each_problem(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path, with_confidence_head=False)
    data = json.loads(json.dumps(verify_checkpoint(root).to_dict()))
    assert data["ok"] is False and data["checks"]["head"] == "failed"
    [p] = data["problems"]
    assert {"code", "check", "subject", "expected", "actual", "hint"} <= set(p)
    assert p["check"] == "head" and p["subject"] == HEAD
