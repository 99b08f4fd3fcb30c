"""Pinned facts (`model.expected.*`): each mismatch is expected vs actual; null is not checked."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from checkpoint_factory import INDEX, build_checkpoint
from omegaconf import OmegaConf

from dspark_cli.checkpoint.result import Check
from dspark_cli.checkpoint.structure import gather_facts, load_layout
from dspark_cli.checkpoint.verify import verify_checkpoint
from dspark_cli.config.schema import ExpectedFacts

REPO = Path(__file__).resolve().parents[1]


def sha256sum(path: Path) -> str:
    return subprocess.run(["sha256sum", str(path)], capture_output=True, text=True,
                          check=True).stdout.split()[0]


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    return build_checkpoint(tmp_path / "ckpt")


def true_pins(root: Path) -> dict[str, object]:
    return {
        "config_sha256": sha256sum(root / "config.json"),
        "index_sha256": sha256sum(root / INDEX),
        "num_shards": 3,
        "total_bytes": sum(p.stat().st_size for p in root.glob("*.safetensors")),
        "architecture": "DeepseekV4ForCausalLM",
    }


def test_facts_agree_with_coreutils(ckpt: Path) -> None:
    facts = gather_facts(load_layout(ckpt)[0])
    pins = true_pins(ckpt)
    assert facts.config_sha256 == pins["config_sha256"]
    assert facts.index_sha256 == pins["index_sha256"]
    du = subprocess.run(["du", "-cb", *map(str, ckpt.glob("*.safetensors"))],
                        capture_output=True, text=True, check=True).stdout
    assert facts.total_bytes == int(du.splitlines()[-1].split()[0])


def test_matching_pins_pass(ckpt: Path) -> None:
    report = verify_checkpoint(ckpt, ExpectedFacts(**true_pins(ckpt)))
    assert report.ok and Check.pins in report.checks


@pytest.mark.parametrize(
    ("key", "wrong", "shown"),
    [("config_sha256", "0" * 64, "0" * 64), ("index_sha256", "f" * 64, "f" * 64),
     ("num_shards", 48, "48"), ("total_bytes", 166878536440, "166,878,536,440"),
     ("architecture", "LlamaForCausalLM", "LlamaForCausalLM")],
)
def test_each_mismatch_is_expected_vs_actual(ckpt: Path, key: str, wrong: object,
                                             shown: str) -> None:
    pins = true_pins(ckpt) | {key: wrong}
    [p] = verify_checkpoint(ckpt, ExpectedFacts(**pins)).problems
    assert (p.code, p.check, p.subject, p.expected) == (
        "pin-mismatch", Check.pins, f"model.expected.{key}", shown)
    actual = true_pins(ckpt)[key]
    assert p.actual == (f"{actual:,}" if isinstance(actual, int) else str(actual))


def test_null_pins_are_not_checked(ckpt: Path) -> None:
    report = verify_checkpoint(ckpt, ExpectedFacts())
    assert report.ok and Check.pins not in report.checks


def test_index_pin_on_an_unsharded_checkpoint(ckpt: Path) -> None:
    (ckpt / INDEX).unlink()
    [p] = [p for p in verify_checkpoint(ckpt, ExpectedFacts(index_sha256="a" * 64)).problems
           if p.check == Check.pins]
    assert p.actual == "absent"


def test_the_deepseek_profile_pins_the_reports_values() -> None:
    expected = OmegaConf.load(REPO / "conf/model/deepseek_v4_flash_dspark.yaml").expected
    assert expected.config_sha256 == (
        "6c8f3d2d3b48707541b88f32f22ef3f0f8a6b57d8523281e2b8d3cdb0ae9a023")
    assert expected.index_sha256 == (
        "98efab455cf08dfbbbaaba6f570e1bf10bf927d2b4c3c453a59c2f6f0e3be92b")
    assert (expected.num_shards, expected.total_bytes) == (48, 166_878_536_440)
    assert expected.architecture == "DeepseekV4ForCausalLM"
