"""The structural pass on real safetensors files: each corruption is found, precisely, and
nothing on disk changes."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from checkpoint_factory import (
    INDEX,
    build_checkpoint,
    build_hf_cache,
    fingerprint,
    rewrite_json,
    rewrite_shard,
    shard_of,
    write_shard,
)

from dspark_cli.checkpoint.result import Check
from dspark_cli.checkpoint.structure import (
    HeaderError,
    ParseError,
    parse_index,
    read_header,
    unsafe_reason,
)
from dspark_cli.checkpoint.verify import verify_checkpoint

SHARD1 = "model-00001-of-00003.safetensors"


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    return build_checkpoint(tmp_path / "ckpt")


def verify_unchanged(root: Path):
    """Verify, and prove the verification left every byte, mode and mtime as it was."""
    before = fingerprint(root.parent)
    report = verify_checkpoint(root)
    assert fingerprint(root.parent) == before
    return report


def codes(report) -> list[tuple[str, str]]:
    return [(p.code, p.subject) for p in report.problems]


def test_clean_checkpoint_passes(ckpt: Path) -> None:
    report = verify_unchanged(ckpt)
    assert report.ok, report.problems
    assert report.num_shards == 3
    assert report.num_tensors == len(json.loads((ckpt / INDEX).read_text())["weight_map"])
    assert report.total_bytes == sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
    assert report.dspark and report.head_verified


def test_missing_shard(ckpt: Path) -> None:
    (ckpt / SHARD1).unlink()
    report = verify_unchanged(ckpt)
    assert ("shard-missing", SHARD1) in codes(report)


def test_truncated_shard(ckpt: Path) -> None:
    with open(ckpt / SHARD1, "r+b") as fh:
        fh.truncate(os.path.getsize(ckpt / SHARD1) - 3)
    report = verify_unchanged(ckpt)
    [bad] = [p for p in report.problems if p.code == "header-invalid"]
    assert bad.subject == SHARD1
    assert "incomplete metadata" in bad.actual


def test_shard_with_trailing_bytes(ckpt: Path) -> None:
    with open(ckpt / SHARD1, "ab") as fh:
        fh.write(b"\0" * 8)
    assert ("header-invalid", SHARD1) in codes(verify_unchanged(ckpt))


def _edit_header(path: Path, change) -> None:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    change(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n :])


def _first_tensor(header: dict) -> str:
    return next(k for k in header if k != "__metadata__")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda h: h[_first_tensor(h)].update(dtype="Q7"), "unknown variant"),
        (lambda h: h[_first_tensor(h)].update(shape=[999]), "invalid shape"),
        (lambda h: h[_first_tensor(h)].update(data_offsets=[0, 1 << 40]), "invalid"),
        (lambda h: [v.update(data_offsets=[0, v["data_offsets"][1] - v["data_offsets"][0]])
                    for k, v in h.items() if k != "__metadata__"], "invalid"),
    ],
    ids=["unknown-dtype", "shape-vs-bytes", "offset-past-end", "overlapping-offsets"],
)
def test_invalid_headers_are_rejected_by_safetensors(ckpt: Path, change, reason: str) -> None:
    _edit_header(ckpt / SHARD1, change)
    report = verify_unchanged(ckpt)
    [bad] = [p for p in report.problems if p.code == "header-invalid"]
    assert bad.subject == SHARD1 and reason in bad.actual
    with pytest.raises(HeaderError):
        read_header(ckpt / SHARD1)


def test_header_length_beyond_file(ckpt: Path) -> None:
    raw = (ckpt / SHARD1).read_bytes()
    (ckpt / SHARD1).write_bytes(struct.pack("<Q", len(raw) * 2) + raw[8:])
    [bad] = [p for p in verify_unchanged(ckpt).problems if p.code == "header-invalid"]
    assert "header length" in bad.actual


def test_header_not_json(ckpt: Path) -> None:
    raw = (ckpt / SHARD1).read_bytes()
    (ckpt / SHARD1).write_bytes(raw[:8] + b"[" + raw[9:])
    [bad] = [p for p in verify_unchanged(ckpt).problems if p.code == "header-invalid"]
    assert "JSON" in bad.actual


def test_tensor_in_index_but_not_in_shard(ckpt: Path) -> None:
    rewrite_shard(ckpt, ckpt / SHARD1, lambda t: t.pop("embed.weight"))
    report = verify_unchanged(ckpt)
    assert ("tensor-missing", "embed.weight") in codes(report)
    assert any(p.code == "total-size-mismatch" for p in report.problems)


def test_unlisted_extra_tensor(ckpt: Path) -> None:
    rewrite_shard(ckpt, ckpt / SHARD1,
                  lambda t: t.update(stray=("F32", np.zeros(2, np.float32))))
    report = verify_unchanged(ckpt)
    [bad] = [p for p in report.problems if p.code == "tensor-unlisted"]
    assert bad.subject == "stray" and SHARD1 in bad.actual


def test_tensor_in_another_shard_than_the_index_says(ckpt: Path) -> None:
    rewrite_json(ckpt / INDEX, lambda d: d["weight_map"].update(
        {"embed.weight": "model-00002-of-00003.safetensors"}))
    [bad] = verify_unchanged(ckpt).problems
    assert (bad.code, bad.subject) == ("tensor-missing", "embed.weight")
    assert bad.expected == "in model-00002-of-00003.safetensors" and bad.actual == f"in {SHARD1}"


def test_total_size_mismatch(ckpt: Path) -> None:
    rewrite_json(ckpt / INDEX, lambda d: d["metadata"].update(total_size=12))
    [bad] = verify_unchanged(ckpt).problems
    assert bad.code == "total-size-mismatch" and bad.actual == "12"


def test_total_size_absent(ckpt: Path) -> None:
    rewrite_json(ckpt / INDEX, lambda d: d.pop("metadata"))
    [bad] = verify_unchanged(ckpt).problems
    assert bad.code == "total-size-mismatch" and bad.actual == "absent"


@pytest.mark.parametrize("name", ["../outside.safetensors", "/etc/passwd", "a/../../x",
                                  "sub\\..\\x.safetensors"])
def test_shard_names_that_climb_out_are_refused(ckpt: Path, name: str) -> None:
    outside = ckpt.parent / "outside.safetensors"
    shutil.copy(ckpt / SHARD1, outside)
    rewrite_json(ckpt / INDEX, lambda d: d["weight_map"].update({"embed.weight": name}))
    report = verify_unchanged(ckpt)
    assert ("shard-path-unsafe", name) in codes(report)
    assert unsafe_reason(name)


def test_config_missing_and_invalid(ckpt: Path) -> None:
    (ckpt / "config.json").write_text("[1, 2]")
    bad = verify_unchanged(ckpt).problems
    assert [(p.code, p.subject) for p in bad] == [("config-invalid", "config.json")]
    assert "JSON object" in bad[0].actual
    (ckpt / "config.json").unlink()
    assert ("config-missing", "config.json") in codes(verify_unchanged(ckpt))


def test_index_invalid(ckpt: Path) -> None:
    (ckpt / INDEX).write_text('{"weight_map": {"a": 3}}')
    report = verify_unchanged(ckpt)
    assert [(p.code, p.subject) for p in report.problems] == [
        ("index-invalid", INDEX), ("head-unreadable", "mtp.*")
    ]
    assert "weight_map['a']" in report.problems[0].actual


def test_directory_without_weights(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    [bad] = verify_unchanged(tmp_path).problems
    assert bad.code == "weights-missing"


def test_single_file_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "single"
    root.mkdir()
    (root / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    write_shard(root / "model.safetensors", {"w": ("F32", np.ones((2, 2), np.float32))})
    report = verify_unchanged(root)
    assert report.ok and report.num_shards == 1 and report.num_tensors == 1
    assert not report.dspark and Check.head not in report.checks


def test_unindexed_shards_holding_one_tensor_twice(tmp_path: Path) -> None:
    root = tmp_path / "dup"
    root.mkdir()
    (root / "config.json").write_text("{}")
    for name in ("a.safetensors", "b.safetensors"):
        write_shard(root / name, {"w": ("F32", np.ones(2, np.float32))})
    [bad] = verify_unchanged(root).problems
    assert (bad.code, bad.subject, bad.actual) == ("tensor-duplicate", "w", "also in b.safetensors")


def test_hugging_face_snapshot_symlinks_are_followed(tmp_path: Path) -> None:
    snapshot = build_hf_cache(tmp_path / "hub")
    assert (snapshot / SHARD1).is_symlink()
    report = verify_unchanged(snapshot)
    assert report.ok and report.num_shards == 3


def test_broken_symlink_is_a_missing_shard(tmp_path: Path) -> None:
    snapshot = build_hf_cache(tmp_path / "hub")
    (snapshot / SHARD1).resolve().unlink()
    assert ("shard-missing", SHARD1) in codes(verify_unchanged(snapshot))


def test_shard_that_is_a_directory(ckpt: Path) -> None:
    (ckpt / SHARD1).unlink()
    (ckpt / SHARD1).mkdir()
    [bad] = [p for p in verify_unchanged(ckpt).problems if p.code == "header-invalid"]
    assert bad.actual == "not a regular file"


def test_every_problem_is_reported_not_just_the_first(ckpt: Path) -> None:
    (ckpt / SHARD1).unlink()
    rewrite_json(ckpt / INDEX, lambda d: d["weight_map"].update({"x": "../y.safetensors"}))
    _edit_header(shard_of(ckpt, "head.weight"), lambda h: h.pop("head.weight"))
    found = {p.code for p in verify_unchanged(ckpt).problems}
    assert {"shard-missing", "shard-path-unsafe", "header-invalid"} <= found


def test_parse_index_rejects_non_integer_total_size() -> None:
    with pytest.raises(ParseError, match="total_size"):
        parse_index(b'{"weight_map": {"a": "b"}, "metadata": {"total_size": "12"}}')
