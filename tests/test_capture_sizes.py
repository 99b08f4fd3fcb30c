"""The preflight rule `cudagraphs-cover-spec-batches`: with speculative decoding and full CUDA
graphs, the captured sizes must reach max_num_seqs x (1 + K) tokens, else the finding names the
batches that run eagerly. Held on every shipped hardware profile with every speculative and
compilation profile, and against vLLM's own capture grid (the installed vLLM's source)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from dspark_cli.launch.effective import EffectiveLaunch, coverage, grid
from dspark_cli.launch.plan import build_plan
from dspark_cli.launch.rules import Context, Status, run_rules
from dspark_cli.paths import conf_dir
from dspark_cli.status import Finding
from tests.conftest import compose_typed
from tests.test_fatal_patterns import source_message

RULE = "cudagraphs-cover-spec-batches"
HW = sorted(p.stem for p in (conf_dir() / "hw").glob("*.yaml"))
SPECULATIVE = sorted(p.stem for p in (conf_dir() / "speculative").glob("*.yaml"))
COMPILATION = sorted(p.stem for p in (conf_dir() / "compilation").glob("*.yaml"))


def finding(overrides: list[str]) -> Finding:
    plan = build_plan(compose_typed(overrides))
    return next(f for f in run_rules(Context(plan, None)) if f.rule == RULE)


@pytest.mark.parametrize("hw", HW)
def test_every_shipped_composition_is_covered(hw: str) -> None:
    """The seed (256 requests x (1 + 7) = 2048 tokens, captured up to 2048) is exactly
    covered; every shipped speculative and compilation profile on every hardware passes."""
    assert len(HW) >= 6 and "dspark_adaptive" in SPECULATIVE
    for spec in SPECULATIVE:
        for comp in COMPILATION:
            if hw == "cpu" and spec.startswith("dspark"):
                continue  # DSpark does not run on CPU (its own rule)
            found = finding([f"+hw={hw}", f"speculative={spec}", f"compilation={comp}"])
            assert found.status is Status.passed, (hw, spec, comp, found.message)


def test_the_seed_is_exactly_covered() -> None:
    plan = build_plan(compose_typed(["+hw=mi350x"]))
    cov = coverage(EffectiveLaunch.of(plan))
    assert cov is not None and (cov.max_num_seqs, cov.query_len) == (256, 8)
    assert cov.covered_tokens == cov.needed_tokens == 2048 and cov.problem() is None


@pytest.mark.parametrize(("overrides", "eager"), [
    (["serving.args.max_num_seqs=512"], "batches of 257 to 512 requests run eagerly"),
    (["compilation.max_cudagraph_capture_size=1024"], "batches of 129 to 256 requests"),
    (["compilation.max_cudagraph_capture_size=null"], "batches of 65 to 256 requests"),
    (["serving.args.max_num_batched_tokens=1536"], "batches of 193 to 256 requests"),
    (["speculative.num_speculative_tokens=9"], "batches of 205 to 256 requests"),
])
def test_short_capture_names_the_eager_batches(overrides: list[str], eager: str) -> None:
    found = finding(["+hw=mi350x", *overrides])
    assert found.status is Status.failed and found.key == "compilation.max_cudagraph_capture_size"
    assert eager in found.message, found.message


def test_the_unset_default_is_wider_on_blackwell() -> None:
    found = finding(["+hw=b200", "compilation.max_cudagraph_capture_size=null"])
    assert "up to 1024 tokens" in found.message and "129 to 256" in found.message


def test_it_does_not_apply_without_speculation_or_full_graphs() -> None:
    for overrides in (["speculative=none"], ["compilation=eager", "speculative=dspark_fixed"],
                      ["compilation.cudagraph_mode=PIECEWISE", "speculative=dspark_fixed"]):
        found = finding(["+hw=h200", "serving.args.max_num_seqs=1024", *overrides])
        assert found.status is Status.passed, (overrides, found.message)


@pytest.mark.vllm  # reads the installed vLLM's source
def test_the_grid_is_vllms() -> None:
    """The capture grid and its truncation line are vLLM's own (config/vllm.py)."""
    assert source_message("config/vllm.py", "Truncating max_cudagraph_capture_size",
                          "2048") == "Truncating max_cudagraph_capture_size to 2048"
    spec = importlib.util.find_spec("vllm")  # found, not imported
    assert spec is not None and spec.origin
    source = (Path(spec.origin).parent / "config/vllm.py").read_text()
    assert re.search(r"range\(8, min\(max_cudagraph_capture_size \+ 1, 256\), 8\)", source)
    assert re.search(r"range\(256, max_cudagraph_capture_size \+ 1, 16\)", source)
    assert grid(2050, 16384)[-1] == 2048 and grid(2048, 1536)[-1] == 1536
