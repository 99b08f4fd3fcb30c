"""checkpoint_findings: what `serve`/`smoke`/`bench` learn about a local checkpoint before a
boot. Adaptive verification without a verified confidence head is refused, unless
`checks.allow_missing_confidence_head=true` says so on purpose (and the finding says OVERRIDDEN).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoint_factory import build_checkpoint, fingerprint, rewrite_json

from dspark_cli.launch.checks import OVERRIDE_KEY, checkpoint_findings
from dspark_cli.launch.plan import speculative_config
from dspark_cli.launch.rules import Status
from tests.conftest import compose_typed

HEAD_RULE = "checkpoint-confidence-head"


def by_rule(overrides: list[str]) -> dict[str, object]:
    cfg = compose_typed(overrides)
    rendered = speculative_config(cfg.speculative) or {}  # what vLLM runs decides
    return {f.rule: f for f in checkpoint_findings(cfg.model, rendered, cfg.checks)}


def adaptive_on(root: Path, *extra: str) -> dict[str, object]:
    """The validation report's deployment (MI350X, dspark_adaptive) on this checkpoint."""
    return by_rule(["+hw=mi350x", "model=local", f"model.path={root}", *extra])


@pytest.fixture
def with_head(tmp_path: Path) -> Path:
    return build_checkpoint(tmp_path / "with-head")


@pytest.fixture
def no_head(tmp_path: Path) -> Path:
    return build_checkpoint(tmp_path / "no-head", with_confidence_head=False)


def test_adaptive_with_a_verified_head_passes(with_head: Path) -> None:
    found = adaptive_on(with_head)
    assert found["checkpoint-structure"].status is Status.passed
    assert found[HEAD_RULE].status is Status.passed
    assert "checkpoint-pins" not in found  # model=local pins nothing


def test_adaptive_without_a_head_is_refused_and_says_why(no_head: Path) -> None:
    before = fingerprint(no_head)
    finding = adaptive_on(no_head)[HEAD_RULE]
    assert finding.status is Status.failed and finding.key == "speculative"
    assert "mtp.2.confidence_head.proj.weight" in finding.message
    assert "speculative=dspark_fixed" in finding.message and OVERRIDE_KEY in finding.message
    assert fingerprint(no_head) == before


def test_the_override_launches_anyway_but_says_so(no_head: Path) -> None:
    finding = adaptive_on(no_head, f"{OVERRIDE_KEY}=true")[HEAD_RULE]
    assert finding.status is Status.skipped and finding.key == OVERRIDE_KEY
    assert finding.message.startswith("OVERRIDDEN") and "online estimator" in finding.message


def test_fixed_k_does_not_need_the_confidence_head(no_head: Path) -> None:
    finding = adaptive_on(no_head, "speculative=dspark_fixed")[HEAD_RULE]
    assert finding.status is Status.passed


def test_fixed_k_still_needs_the_markov_heads(no_head: Path) -> None:
    rewrite_json(no_head / "config.json", lambda c: c.update(dspark_markov_rank=8))
    finding = adaptive_on(no_head, "speculative=dspark_fixed")[HEAD_RULE]
    assert finding.status is Status.failed and "markov_w1" in finding.message


def test_a_disabled_head_is_refused_for_adaptive(with_head: Path) -> None:
    rewrite_json(with_head / "config.json", lambda c: c.update(enable_confidence_head=False))
    finding = adaptive_on(with_head)[HEAD_RULE]
    assert finding.status is Status.failed and "enable_confidence_head" in finding.message


def test_a_checkpoint_that_is_not_local_cannot_prove_its_head(tmp_path: Path) -> None:
    found = adaptive_on(tmp_path / "not-downloaded")
    assert found["checkpoint-structure"].status is Status.skipped
    assert found[HEAD_RULE].status is Status.failed
    assert "not a local directory" in found[HEAD_RULE].message


def test_a_checkpoint_without_dspark_keys_cannot_prove_its_head(with_head: Path) -> None:
    rewrite_json(with_head / "config.json",
                 lambda c: [c.pop(k) for k in list(c) if k.startswith("dspark_")])
    finding = adaptive_on(with_head)[HEAD_RULE]
    assert finding.status is Status.failed and "no dspark_* key" in finding.message


def test_structural_damage_fails_preflight(with_head: Path) -> None:
    (with_head / "model-00002-of-00003.safetensors").unlink()
    finding = adaptive_on(with_head, "speculative=none")["checkpoint-structure"]
    assert finding.status is Status.failed and finding.key == "model.path"
    assert "model-00002-of-00003.safetensors" in finding.message


def test_pinned_profile_on_another_checkpoint_fails_the_pins(with_head: Path) -> None:
    found = by_rule(["+hw=mi350x", f"model.path={with_head}"])
    assert found["checkpoint-pins"].status is Status.failed
    assert found["checkpoint-pins"].key == "model.expected"
    assert "model.expected.num_shards: expected 48, found 3" in found["checkpoint-pins"].message


def test_cpu_default_has_no_dspark_draft(with_head: Path) -> None:
    found = by_rule(["+hw=cpu", f"model.path={with_head}"])
    assert found[HEAD_RULE].status is Status.skipped
    assert found["checkpoint-structure"].status is Status.passed


def test_a_separate_draft_directory_is_where_the_heads_are(tmp_path: Path,
                                                           no_head: Path) -> None:
    draft = build_checkpoint(tmp_path / "draft")
    found = adaptive_on(no_head, f"speculative.model={draft}")
    assert found[HEAD_RULE].status is Status.passed
