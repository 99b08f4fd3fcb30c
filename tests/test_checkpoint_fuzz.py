"""Hypothesis against the header and index parsing: random bytes, truncated and mutated
headers, hostile JSON. Every input ends in a report or the module's own error type, never in an
uncaught exception."""

from __future__ import annotations

import json
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from checkpoint_factory import INDEX, build_checkpoint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dspark_cli.checkpoint.content import ManifestError, parse_manifest
from dspark_cli.checkpoint.structure import (
    HeaderError,
    ParseError,
    parse_config,
    parse_index,
    read_header,
)
from dspark_cli.checkpoint.verify import ContentRequest, verify_checkpoint
from dspark_cli.config.schema import ExpectedFacts

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=4),
    max_leaves=20,
)
# Names a hostile index might give a shard: climbing, absolute, NUL, surrogates, very long.
hostile_names = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["..", "../x.safetensors", "/etc/passwd", "a/../../b", "\0", "\ud800",
                     "x" * 5000, "sub/" * 300 + "x", ".", "", "model-00001-of-00003.safetensors"]),
)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("fuzz") / "ckpt")


def copy_of(template: Path) -> Path:
    root = Path(tempfile.mkdtemp(prefix="dspark-fuzz-")) / "ckpt"
    shutil.copytree(template, root)
    return root


@SETTINGS
@given(st.binary(max_size=512))
def test_parse_index_random_bytes(raw: bytes) -> None:
    try:
        index = parse_index(raw)
    except ParseError as e:
        assert str(e)
    else:
        assert all(isinstance(v, str) for v in index.weight_map.values())


@SETTINGS
@given(json_values | st.fixed_dictionaries({"weight_map": json_values, "metadata": json_values}))
def test_parse_index_and_config_hostile_json(value: object) -> None:
    raw = json.dumps(value).encode()
    try:
        assert isinstance(parse_config(raw), dict)
    except ParseError:
        assert not isinstance(value, dict)
    try:
        index = parse_index(raw)
    except ParseError as e:
        assert str(e)
    else:
        assert isinstance(value, dict) and index.weight_map == value["weight_map"]


@pytest.mark.parametrize("raw", [b"[" * 200_000, b'{"a":' * 200_000, b"\xff\xfe{}",
                                 b'{"weight_map": {"a": "b"}, "metadata": {"total_size": 1e999}}'])
def test_parse_index_pathological(raw: bytes) -> None:
    with pytest.raises(ParseError):
        parse_index(raw)


@SETTINGS
@given(st.binary(max_size=256))
def test_read_header_random_bytes(raw: bytes) -> None:
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as fh:
        fh.write(raw)
        fh.flush()
        try:
            header = read_header(Path(fh.name))
        except HeaderError as e:
            assert str(e)
        else:
            assert header.file_size == len(raw)


@SETTINGS
@given(data=st.data())
def test_read_header_truncated_and_mutated(template: Path, data: st.DataObject) -> None:
    raw = bytearray((template / "model-00001-of-00003.safetensors").read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    if data.draw(st.booleans(), label="truncate"):
        raw = raw[: data.draw(st.integers(0, len(raw)), label="keep")]
    else:
        for _ in range(data.draw(st.integers(1, 4), label="flips")):
            at = data.draw(st.integers(0, 8 + n - 1), label="at")
            raw[at] = data.draw(st.integers(0, 255), label="byte")
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as fh:
        fh.write(raw)
        fh.flush()
        try:
            header = read_header(Path(fh.name))
        except HeaderError:
            return
        assert header.data_bytes == len(raw) - 8 - header.header_len >= 0
        for name in header.names:
            t = header.tensor(name)
            assert 8 + header.header_len <= t.start <= t.end <= len(raw)


@SETTINGS
@given(weight_map=st.dictionaries(st.text(max_size=30), hostile_names, max_size=6),
       total=json_values)
def test_verify_with_hostile_index(template: Path, weight_map: dict, total: object) -> None:
    root = copy_of(template)
    try:
        (root / INDEX).write_text(json.dumps(
            {"weight_map": weight_map, "metadata": {"total_size": total}}))
        report = verify_checkpoint(root)
        assert not report.ok
    finally:
        shutil.rmtree(root.parent)


@SETTINGS
@given(changes=st.dictionaries(
    st.sampled_from(["hidden_size", "vocab_size", "draft_vocab_size", "dspark_markov_rank",
                     "dspark_target_layer_ids", "n_mtp_layers", "mask_token_id",
                     "enable_confidence_head", "architectures", "dflash_config"]),
    json_values, min_size=1, max_size=4))
def test_verify_with_hostile_config(template: Path, changes: dict) -> None:
    root = copy_of(template)
    try:
        config = json.loads((root / "config.json").read_text())
        (root / "config.json").write_text(json.dumps(config | changes))
        report = verify_checkpoint(root, ExpectedFacts(architecture="DeepseekV4ForCausalLM"))
        assert all(p.code and p.subject and p.hint for p in report.problems)
    finally:
        shutil.rmtree(root.parent)


@SETTINGS
@given(text=st.text(max_size=300), names=st.lists(hostile_names, max_size=4))
def test_manifest_parsing_and_comparison(template: Path, text: str, names: list[str]) -> None:
    try:
        entries = parse_manifest(text)
    except ManifestError as e:
        assert str(e)
        entries = {}
    entries |= dict.fromkeys(names, "0" * 64)
    if not entries:
        return
    report = verify_checkpoint(template, content=ContentRequest(manifest=entries, progress=False))
    assert not report.ok
