"""Every preflight rule fires on the config that breaks it, and names the key to change."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dspark_cli.config.choices import Platform
from dspark_cli.launch.plan import build_plan
from dspark_cli.launch.rules import RULES, Context, Status, run_rules
from dspark_cli.machine.detect import Gpu, Machine
from tests.conftest import REPO, compose_typed, dspark_argv, dspark_env, run_dspark
from tests.fake_gpu import fake_host

MI350X = Machine(Platform.rocm, tuple(Gpu(i, "AMD Instinct MI350X", "gfx950") for i in range(8)))
H200 = Machine(Platform.cuda, (Gpu(0, "NVIDIA H200", "sm_90"),))
CPU = Machine(Platform.cpu)


def findings(overrides: list[str], machine: Machine | None = None) -> dict[str, object]:
    cfg = compose_typed(overrides)
    return {f.rule: f for f in run_rules(Context(build_plan(cfg), machine))}


def failed(overrides: list[str], machine: Machine | None = None) -> set[str]:
    return {r for r, f in findings(overrides, machine).items() if f.status is Status.failed}


# (rule, overrides that break it, machine). Each case must fail that rule.
CASES = [
    ("adaptive-needs-dspark", ["+hw=cpu", "speculative=draft_model",
                               "speculative.enable_adaptive_verification=true"], None),
    ("adaptive-needs-full-cudagraphs", ["+hw=mi350x", "compilation=eager"], None),
    ("adaptive-no-eager", ["+hw=mi350x", "compilation.enforce_eager=true"], None),
    ("adaptive-no-pipeline-parallel", ["+hw=mi350x", "hw.args.pipeline_parallel_size=2",
                                       "hw.args.tensor_parallel_size=4"], None),
    ("adaptive-no-lora", ["+hw=mi350x", "serving.args.enable_lora=true"], None),
    ("adaptive-incompatible-options",
     ["+hw=mi350x", "+serving.extra_args.enable_return_routed_experts=true"], None),
    ("adaptive-incompatible-options",
     ["+hw=mi350x", "+speculative.extra.use_local_argmax_reduction=true"], None),
    ("dspark-needs-v2-runner", ["+hw=mi350x", "~speculative.env.VLLM_USE_V2_MODEL_RUNNER"],
     None),
    ("dspark-needs-k", ["+hw=mi350x", "speculative.num_speculative_tokens=null"], None),
    ("dspark-draft-topk", ["+hw=mi350x", "+speculative.extra.dspark_draft_topk=8"], None),
    ("dspark-draft-topk", ["+hw=cpu", "speculative=ngram",
                           "+speculative.extra.dspark_draft_topk=8"], None),
    ("dspark-not-on-cpu", ["+hw=cpu", "speculative=dspark_fixed"], None),
    ("draft-path-keeps-method", ["+hw=cpu", "speculative=draft_model",
                                 "speculative.model=/data/dspark/tiny"], None),
    ("sparse-mla-fp8-kv", ["+hw=mi350x", "model.args.kv_cache_dtype=auto"], None),
    ("parallel-fits-profile", ["+hw=mi350x", "hw.args.data_parallel_size=2"], None),
    ("cudagraphs-cover-spec-batches", ["+hw=mi350x", "serving.args.max_num_seqs=512"], None),
    ("aiter-needs-rocm", ["+hw=h200", "hw.args.moe_backend=aiter"], None),
    ("platform-matches-machine", ["+hw=mi350x"], CPU),
    ("platform-matches-machine", ["+hw=cpu"], MI350X),
    ("gpus-match-profile", ["+hw=mi355x"], MI350X),
    ("gpus-match-profile", ["+hw=b200"], H200),
    ("parallel-fits-machine", ["+hw=h200"], H200),
    ("aiter-importable", ["+hw=mi350x"], MI350X),
]


@pytest.mark.parametrize(("rule", "overrides", "machine"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_fires(rule: str, overrides: list[str], machine: Machine | None) -> None:
    found = findings(overrides, machine)[rule]
    assert found.status is Status.failed, found
    assert found.key and found.message


# Rules whose firing case needs another installed vLLM: held by their own tests below.
INSTALLED_VLLM_CASES = {"adaptive-in-installed-vllm"}


def test_every_rule_has_a_firing_case() -> None:
    assert {r.id for r in RULES} <= {c[0] for c in CASES} | INSTALLED_VLLM_CASES


def vllm_026(root: Path) -> Path:
    """vLLM 0.26.0 as installed in the H200 image, as far as the rule reads it: its metadata and
    a SpeculativeConfig with DSpark but no enable_adaptive_verification."""
    (root / "vllm-0.26.0.dist-info").mkdir(parents=True)
    (root / "vllm-0.26.0.dist-info/METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.26.0\n")
    (root / "vllm/config").mkdir(parents=True)
    (root / "vllm/__init__.py").write_text("")
    (root / "vllm/config/__init__.py").write_text("")
    (root / "vllm/config/speculative.py").write_text(
        "class SpeculativeConfig:\n    num_speculative_tokens: int | None = None\n"
        "    method: str | None = None\n    dspark_draft_topk: int | None = None\n")
    return root


def test_adaptive_verification_is_refused_on_a_vllm_without_it(tmp_path: Path) -> None:
    """On the H200's vLLM 0.26 the seed's adaptive arm is refused before anything boots, by
    name and version; the fixed-K arm passes the rule (vLLM 0.32 here has the field)."""
    env = dspark_env({"PYTHONPATH": os.pathsep.join([str(vllm_026(tmp_path / "site")),
                                                     str(REPO)])})
    done = subprocess.run(dspark_argv("serve", "+hw=h200", "--dry-run"), capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 1
    assert ("adaptive-in-installed-vllm FAILED: the installed vLLM 0.26.0 (vllm) has no "
            "adaptive verification") in done.stderr
    # 0.27.x has none either: vLLM 0.28.0 is the first with enable_adaptive_verification.
    assert "it came with vLLM 0.28.0)" in done.stderr
    assert "use speculative=dspark_fixed" in done.stderr and "Traceback" not in done.stderr
    fixed = subprocess.run(dspark_argv("serve", "+hw=h200", "speculative=dspark_fixed",
                                       "--dry-run"), capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
    assert "adaptive-in-installed-vllm FAILED" not in fixed.stderr
    assert failed(["+hw=h200"]) == set(), "the vLLM installed here has adaptive verification"


def test_the_seed_passes_every_plan_rule() -> None:
    assert failed(["+hw=mi350x"]) == set()


def test_the_cpu_default_passes_every_rule_on_this_machine() -> None:
    for spec in ("none", "draft_model", "ngram"):
        assert failed(["+hw=cpu", f"speculative={spec}"], CPU) == set()


def test_dry_run_skips_only_machine_rules() -> None:
    skipped = {r for r, f in findings(["+hw=mi350x"]).items() if f.status is Status.skipped}
    assert skipped == {r.id for r in RULES if r.needs_machine}


def test_dry_run_cli_reports_the_failure_and_the_key() -> None:
    done = run_dspark("serve", "+hw=mi350x", "compilation=eager", "--dry-run")
    assert done.returncode == 1
    assert "adaptive-needs-full-cudagraphs FAILED" in done.stderr
    assert "change `compilation`" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("host", ["no-gpu", "h200x8"])
@pytest.mark.usefixtures("default_port_busy")
def test_explicit_gpu_profile_on_another_machine_is_refused(tmp_path: Path, host: str) -> None:
    # A fake host, whatever this one has: on a real MI350X this would launch the seed. The
    # preflight answers before the port is looked at: a server on 8000 changes nothing.
    done = run_dspark("serve", "+hw=mi350x", cwd=tmp_path,
                      env=fake_host(tmp_path / "host", host))
    assert done.returncode == 1, done.stderr
    assert "platform-matches-machine FAILED" in done.stderr
    assert "nothing was started" in done.stderr and "already in use" not in done.stderr
