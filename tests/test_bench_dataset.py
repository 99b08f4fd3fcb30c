"""The frozen request set: pinned by SHA-256, SPEED-Bench placeholders refused, files untouched."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from dspark_cli.bench.dataset import SPEED_BENCH_SENTINEL, dataset_spec, verify
from dspark_cli.config.bench import DatasetConf, DatasetKind
from dspark_cli.errors import CheckFailed, UsageError


def write_speed_bench(directory: Path, rows: int, prompt: str = "Explain {i}.") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "throughput_1k.jsonl"
    lines = [json.dumps({"category": "c", "messages": [
        {"role": "user", "content": prompt.format(i=i)}]}) for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def spec_for(tmp_path: Path, **fields: object):
    base = {"kind": DatasetKind.speed_bench, "path": "sb", "subset": "throughput_1k"}
    return dataset_spec(DatasetConf(**{**base, **fields}), tmp_path)


def test_a_pinned_set_verifies_and_counts_rows(tmp_path: Path) -> None:
    file = write_speed_bench(tmp_path / "sb", 10)
    verified = verify(spec_for(tmp_path, sha256=sha(file).upper()), needed_rows=10)
    assert verified.sha256 == sha(file) and verified.rows == 10
    assert verified.spec.request_file == file


def test_a_changed_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    file = write_speed_bench(tmp_path / "sb", 10)
    pin = sha(file)
    file.write_text(file.read_text().replace("Explain 3.", "Explain 4."))
    before = file.read_bytes()
    with pytest.raises(CheckFailed) as exc:
        verify(spec_for(tmp_path, sha256=pin), needed_rows=1)
    assert pin in exc.value.message and sha(file) in exc.value.message
    assert "not the frozen request set" in exc.value.message
    assert file.read_bytes() == before


def test_speed_bench_placeholders_are_refused_even_when_pinned(tmp_path: Path) -> None:
    file = write_speed_bench(tmp_path / "sb", 5, prompt=SPEED_BENCH_SENTINEL + " {i}")
    with pytest.raises(CheckFailed) as exc:
        verify(spec_for(tmp_path, sha256=sha(file)), needed_rows=1)
    assert "placeholder" in exc.value.message and "line 1" in exc.value.message
    assert "prepare.py" in (exc.value.hint or "")


def test_an_unpinned_file_is_refused_with_its_hash_to_pin(tmp_path: Path) -> None:
    file = write_speed_bench(tmp_path / "sb", 3)
    with pytest.raises(UsageError) as exc:
        verify(spec_for(tmp_path), needed_rows=1)
    assert f"bench.dataset.sha256={sha(file)}" in (exc.value.hint or "")


def test_a_missing_set_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as exc:
        verify(spec_for(tmp_path, sha256="0" * 64), needed_rows=1)
    assert "does not exist" in exc.value.message
    assert "dspark prepare speed-bench SRC" in (exc.value.hint or "")


def test_too_few_rows_for_a_phase_is_refused(tmp_path: Path) -> None:
    file = write_speed_bench(tmp_path / "sb", 3)
    with pytest.raises(UsageError) as exc:
        verify(spec_for(tmp_path, sha256=sha(file)), needed_rows=880)
    assert "has 3 requests" in exc.value.message and "880" in exc.value.message


def test_rows_must_carry_the_field_vllms_loader_reads(tmp_path: Path) -> None:
    file = tmp_path / "set.jsonl"
    file.write_text(json.dumps({"text": "no prompt key"}) + "\n")
    spec = dataset_spec(DatasetConf(DatasetKind.jsonl, str(file), sha256=sha(file)), tmp_path)
    with pytest.raises(CheckFailed) as exc:
        verify(spec, needed_rows=1)
    assert "'prompt'" in exc.value.message


def test_a_jsonl_set_verifies(tmp_path: Path) -> None:
    file = tmp_path / "set.jsonl"
    file.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(4)))
    spec = dataset_spec(DatasetConf(DatasetKind.jsonl, "set.jsonl", sha256=sha(file)), tmp_path)
    assert verify(spec, needed_rows=4).rows == 4


def test_random_prompts_have_nothing_to_pin(tmp_path: Path) -> None:
    spec = dataset_spec(DatasetConf(DatasetKind.random, input_tokens=32), tmp_path)
    verified = verify(spec, needed_rows=10**6)
    assert (verified.sha256, verified.rows, spec.request_file) == (None, None, None)


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"kind": DatasetKind.jsonl}, "needs bench.dataset.path"),
    ({"kind": DatasetKind.speed_bench, "path": "x"}, "needs bench.dataset.subset"),
    ({"kind": DatasetKind.random}, "needs bench.dataset.input_tokens"),
])
def test_incomplete_dataset_config_is_a_usage_error(
        tmp_path: Path, fields: dict[str, object], fragment: str) -> None:
    with pytest.raises(UsageError) as exc:
        dataset_spec(DatasetConf(**fields), tmp_path)
    assert fragment in exc.value.message
