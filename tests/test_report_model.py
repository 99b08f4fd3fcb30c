"""The report's model as its checkpoint states it: its own name (not the served name) and the
quantization in words with the config.json fields it is read from, held to real checkpoints
(safetensors files and config.json written by tests/checkpoint_factory.py) read by the same
`checkpoint_identity` every launch records into provenance.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dspark_cli.launch.record import checkpoint_identity
from dspark_cli.report.markdown import write_report
from tests.checkpoint_factory import (
    DSV4_FLASH_QUANTIZATION,
    Spec,
    build_checkpoint,
    build_hf_cache,
    rewrite_json,
)
from tests.conftest import run_dspark
from tests.report_factory import smoke_run

QUANT = ("FP4 expert weights with FP8 mixed precision (config.json: expert_dtype=fp4; "
         "quantization_config activation_scheme=dynamic, fmt=e4m3, quant_method=fp8, "
         "scale_fmt=ue8m0, weight_block_size=\\[128, 128\\])")


def smoke_with(root: Path, checkpoint: dict[str, Any]) -> Path:
    """A smoke run whose provenance.json records `checkpoint` (as a launch records it)."""
    smoke_run(root)
    prov = json.loads((root / "provenance.json").read_text())
    (root / "provenance.json").write_text(json.dumps({**prov, "checkpoint": checkpoint}))
    return root


def model_lines(text: str) -> dict[str, str]:
    part = text.split("### Model")[1].split("###")[0]
    return dict(line[2:].split(": ", 1) for line in part.splitlines() if line.startswith("- "))


def test_a_checkpoint_directory_gives_its_name_and_quantization(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path / "DeepSeek-V4-Flash-DSpark")
    facts = checkpoint_identity(str(root))
    config = json.loads((root / "config.json").read_text())
    assert facts["quantization"] == dict(sorted(config["quantization_config"].items())) \
        == dict(sorted(DSV4_FLASH_QUANTIZATION.items()))
    assert (facts["name"], facts["name_from"], facts["expert_dtype"]) == (
        "DeepSeek-V4-Flash-DSpark", "directory", "fp4")
    _, text = write_report([smoke_with(tmp_path / "smoke", facts)], tmp_path / "out")
    lines = model_lines(text)
    assert lines["Model"] == ("DeepSeek-V4-Flash-DSpark (the checkpoint directory's name; "
                              "config.json names none), served as dsv4flash")
    assert lines["Quantization"] == QUANT
    assert lines["Architecture"] == "DeepseekV4ForCausalLM"


def test_a_hugging_face_cache_and_a_named_config(tmp_path: Path) -> None:
    snapshot = build_hf_cache(tmp_path / "hub")
    facts = checkpoint_identity(str(snapshot))
    assert (facts["name"], facts["name_from"]) == ("deepseek-ai/DeepSeek-V4-Flash-DSpark",
                                                   "hf_cache")
    named = build_checkpoint(tmp_path / "ckpt", Spec(config_extra={
        "_name_or_path": "deepseek-ai/DeepSeek-V4-Flash-DSpark"}))
    facts = checkpoint_identity(str(named))
    assert (facts["name"], facts["name_from"]) == ("deepseek-ai/DeepSeek-V4-Flash-DSpark",
                                                   "config")
    _, text = write_report([smoke_with(tmp_path / "smoke", facts)], tmp_path / "out")
    assert model_lines(text)["Model"] == ("deepseek-ai/DeepSeek-V4-Flash-DSpark (config.json's "
                                          "\\_name_or_path), served as dsv4flash")


@pytest.mark.parametrize(("change", "words"), [
    (lambda c: c.pop("quantization_config"), "none (config.json has no quantization_config); "
     "expert_dtype=fp4"),
    (lambda c: c.update(expert_dtype="fp8"), "FP8 (config.json: expert_dtype=fp8; "),
    (lambda c: c["quantization_config"].pop("quant_method"), "quantization_config without a "
     "quant_method (config.json: expert_dtype=fp4; "),
])
def test_other_quantizations_are_stated_as_they_are(tmp_path: Path, change: Any,
                                                    words: str) -> None:
    root = build_checkpoint(tmp_path / "ckpt")
    rewrite_json(root / "config.json", change)
    _, text = write_report([smoke_with(tmp_path / "smoke", checkpoint_identity(str(root)))],
                           tmp_path / "out")
    assert model_lines(text)["Quantization"].startswith(words)


def test_hostile_checkpoint_facts_are_escaped_or_refused(tmp_path: Path) -> None:
    root = build_checkpoint(tmp_path / "ckpt", Spec(config_extra={
        "_name_or_path": "evil](http://x.example)<script>"}))
    rewrite_json(root / "config.json", lambda c: c["quantization_config"].update(
        fmt="**e4m3** <img src=x>", weight_block_size=["`", 128]))
    facts = checkpoint_identity(str(root))
    _, text = write_report([smoke_with(tmp_path / "smoke", facts)], tmp_path / "out")
    lines = model_lines(text)
    assert lines["Model"].startswith("evil\\](http://x.example)&lt;script&gt; (config.json")
    assert "fmt=\\*\\*e4m3\\*\\* &lt;img src=x&gt;" in lines["Quantization"]
    assert 'weight_block_size=\\["\\`", 128\\]' in lines["Quantization"]
    bad = smoke_with(tmp_path / "bad", {**facts, "name": ["not", "text"]})
    done = run_dspark("report", str(bad), "--out", str(tmp_path / "out2"))
    assert done.returncode == 2 and "checkpoint.name must be a string" in done.stderr, \
        done.stderr
    assert not (tmp_path / "out2").exists()
