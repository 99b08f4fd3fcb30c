"""The validation report's image, held to its own facts: its vLLM reports the base it was built
from (2a02f6efe), so that is what `+image=seed_mi350x` pins, and the patch on top (ad170197) is a
recorded fact of the image that the report shows beside it. A commit pin too short to mean
anything (empty, one character, under 7 hex digits) is a config error, never a pin that matches
every commit."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_cli.config.typed import plain
from dspark_cli.errors import ExitCode
from dspark_cli.launch.runtime import Runtime, matches, mismatches
from dspark_cli.report.markdown import write_report
from tests.conftest import REPO, compose_typed, run_dspark
from tests.report_factory import SEED_RUNTIME, smoke_run

BASE, PATCH = "2a02f6efe", "ad170197f40a3e48eddbb92bd195a2e5db684267"


def image_site(root: Path) -> Path:
    """A site directory holding vLLM as the image installs it: built from a checkout of the
    base (setuptools-scm's `+g<hash>` version and generated `_version.py`), the patch applied
    to the files without a commit of its own."""
    site = root / "site"
    dist = site / "vllm-0.1.dev1+g2a02f6efe.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\n"
                                   "Version: 0.1.dev1+g2a02f6efe\n")
    (dist / "RECORD").write_text("")
    (site / "vllm").mkdir()
    (site / "vllm" / "_version.py").write_text(
        "__version__ = version = '0.1.dev1+g2a02f6efe'\n"
        "__commit_id__ = commit_id = 'g2a02f6efe'\n")
    return site


def test_the_images_installed_vllm_satisfies_the_mi350x_commit_pin(tmp_path: Path) -> None:
    code = ("import json; from dspark_cli.launch.runtime import installed; "
            "print(json.dumps(installed().to_dict()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": f"{image_site(tmp_path)}:{REPO}"})
    here = Runtime(**json.loads(done.stdout.splitlines()[-1]))
    assert here.vllm_commit == BASE and here.vllm_version == "0.1.dev1+g2a02f6efe"
    pins = compose_typed(["+hw=mi350x", "+image=seed_mi350x"]).runtime.expected
    assert pins.vllm_commit == BASE
    assert mismatches({"vllm_commit": pins.vllm_commit}, here) == []
    # the patch commit, pinned as the vLLM commit, is what this image can never satisfy
    assert mismatches({"vllm_commit": PATCH}, here) == [
        f"vllm_commit: expected {PATCH}, found {BASE}"]


def test_a_report_of_the_image_passes_the_pin_check_and_shows_base_and_patch(
        tmp_path: Path) -> None:
    run = smoke_run(tmp_path / "smoke")
    recorded = json.loads((run / "provenance.json").read_text())["runtime"]
    assert recorded == SEED_RUNTIME  # the facts the validation report states
    cfg = compose_typed(["+hw=mi350x", "+image=seed_mi350x"])
    assert mismatches(plain(cfg.runtime.expected), Runtime(**recorded)) == []
    assert cfg.runtime.image.vllm_patch == PATCH
    _, text = write_report([run], tmp_path / "out")
    assert re.search(rf"^vLLM base: +{BASE}$", text, re.MULTILINE), text
    assert re.search(rf"^vLLM patch: +{PATCH}$", text, re.MULTILINE), text


@pytest.mark.parametrize("override", [
    "runtime.expected.vllm_commit=''", "runtime.expected.vllm_commit=a",
    "runtime.expected.vllm_commit=2a02f6", "runtime.expected.aiter_commit=zz02f6efe",
    "runtime.expected.aiter_wheel_sha256=30360d15", "runtime.image.vllm_patch=ad",
])
def test_a_commit_pin_too_short_to_mean_anything_is_a_config_error(override: str) -> None:
    done = run_dspark("serve", "+hw=cpu", override, "--dry-run")
    assert done.returncode == ExitCode.USAGE == 2, done.stderr
    key = override.split("=")[0]
    assert f"`{key}=" in done.stderr and "hex digits" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_patch_fact_from_the_environment_is_checked_too() -> None:
    done = run_dspark("serve", "+hw=cpu", "--dry-run", env={"DSPARK_VLLM_PATCH": "x"})
    assert done.returncode == 2 and "runtime.image.vllm_patch" in done.stderr, done.stderr


def test_no_short_hash_matches_by_prefix() -> None:
    full = "2a02f6efe1234567"
    assert matches("vllm_commit", BASE, full) and matches("vllm_commit", full + "ff", full)
    for short in ("", "2", "2a02f6"):
        assert not matches("vllm_commit", short, full)
        assert not matches("vllm_commit", full, short)
