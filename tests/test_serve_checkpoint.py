"""`dspark serve` runs the checkpoint checks in preflight and refuses adaptive verification
without a verified confidence head (vLLM itself would silently fall back)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkpoint_factory import build_checkpoint
from tests.conftest import run_dspark


@pytest.mark.usefixtures("default_port_busy")  # the preflight answers before the port
def test_adaptive_on_a_checkpoint_without_confidence_head_is_refused(tmp_path: Path) -> None:
    ckpt = build_checkpoint(tmp_path / "ckpt", with_confidence_head=False)
    for extra in ([], ["--dry-run"]):
        done = run_dspark("serve", "+hw=mi350x", "model=local", f"model.path={ckpt}",
                          "model.family=deepseek_v4", "model.args.kv_cache_dtype=fp8", *extra,
                          cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        assert "checkpoint-confidence-head FAILED" in done.stderr
        assert "already in use" not in done.stderr
        assert "confidence_head.proj.weight" in done.stderr
        assert "speculative=dspark_fixed" in done.stderr


def test_the_same_checkpoint_passes_for_fixed_k_and_with_the_override(tmp_path: Path) -> None:
    ckpt = build_checkpoint(tmp_path / "ckpt", with_confidence_head=False)
    base = ["serve", "+hw=mi350x", "model=local", f"model.path={ckpt}",
            "model.family=deepseek_v4", "model.args.kv_cache_dtype=fp8", "--dry-run"]
    fixed = run_dspark(*base, "speculative=dspark_fixed")
    assert fixed.returncode == 0, fixed.stderr
    overridden = run_dspark(*base, "checks.allow_missing_confidence_head=true")
    assert overridden.returncode == 0, overridden.stderr
    assert "OVERRIDDEN by checks.allow_missing_confidence_head=true" in overridden.stderr


def test_a_complete_checkpoint_passes_the_head_check(tmp_path: Path) -> None:
    ckpt = build_checkpoint(tmp_path / "ckpt")
    done = run_dspark("serve", "+hw=mi350x", "model=local", f"model.path={ckpt}",
                      "model.family=deepseek_v4", "model.args.kv_cache_dtype=fp8", "--dry-run",
                      "--json")
    assert done.returncode == 0, done.stderr
    assert '"rule": "checkpoint-confidence-head",\n      "status": "passed"' in done.stdout


def test_a_corrupt_shard_fails_preflight(tmp_path: Path) -> None:
    ckpt = build_checkpoint(tmp_path / "ckpt")
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[:20])
    done = run_dspark("serve", "+hw=mi350x", "model=local", f"model.path={ckpt}",
                      "model.family=deepseek_v4", "model.args.kv_cache_dtype=fp8", "--dry-run")
    assert done.returncode == 1
    assert "checkpoint-structure FAILED" in done.stderr
