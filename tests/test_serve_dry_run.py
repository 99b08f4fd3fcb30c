"""`dspark serve --dry-run` renders deployments exactly, through the real CLI."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_cli.launch.rules import RULES
from tests.conftest import REPO, run_dspark, seed_cache, session_root
from tests.fake_gpu import fake_host

SEED = Path(__file__).parent / "data" / "seed_deployment.sh"
AITER_ENV = {"VLLM_ROCM_USE_AITER", "AITER_USE_CK_MOE_SORTING", "AITER_USE_FLYDSL_MOE_SORTING",
             "VLLM_ROCM_AITER_MOE_DISPATCH_POLICY"}
DSPARK_ENV = {"VLLM_USE_V2_MODEL_RUNNER", "VLLM_USE_BREAKABLE_CUDAGRAPH",
              "VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN"}


def parse_script(text: str) -> tuple[dict[str, str], list[str], dict[str, object]]:
    """(exports, positional argv, {flag: value}) of a rendered deployment; JSON values parsed,
    a flag without a value maps to True. Fails on a repeated flag."""
    tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    env, rest = {}, []
    i = 0
    while i < len(tokens):
        if tokens[i] == "export":
            name, _, value = tokens[i + 1].partition("=")
            env[name] = value
            i += 2
        else:
            rest.append(tokens[i])
            i += 1
    first = next(i for i, t in enumerate(rest) if t.startswith("--"))
    positional, flags = rest[:first], {}
    i = first
    while i < len(rest):
        flag = rest[i]
        assert flag not in flags, f"{flag} rendered twice"
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            value: object = rest[i + 1]
            if str(value).startswith("{"):
                value = json.loads(str(value))
            flags[flag] = value
            i += 2
        else:
            flags[flag] = True
            i += 1
    return env, positional, flags


def dry_run(*overrides: str, env: dict[str, str] | None = None
            ) -> tuple[dict[str, str], list[str], dict[str, object]]:
    done = run_dspark("serve", *overrides, "--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return parse_script(done.stdout)


def test_mi350x_renders_the_reports_deployment_exactly() -> None:
    assert dry_run("+hw=mi350x") == parse_script(SEED.read_text())


def test_mi350x_output_is_valid_shell_with_the_seed_values() -> None:
    done = run_dspark("serve", "+hw=mi350x", "--dry-run")
    env, positional, flags = parse_script(done.stdout)
    assert positional == ["vllm", "serve", "/models/DeepSeek-V4-Flash-DSpark"]
    assert len(env) == 7 and len(flags) == 17
    assert flags["--speculative-config"] == {
        "method": "dspark", "num_speculative_tokens": 7, "enable_adaptive_verification": True}


def test_speculative_none_on_mi350x_exports_only_what_it_needs() -> None:
    env, _, flags = dry_run("+hw=mi350x", "speculative=none")
    assert set(env) == AITER_ENV
    assert "--speculative-config" not in flags


def test_dspark_fixed_keeps_the_v2_runner_but_not_adaptive_knobs() -> None:
    env, _, flags = dry_run("+hw=mi350x", "speculative=dspark_fixed")
    assert set(env) == AITER_ENV | {"VLLM_USE_V2_MODEL_RUNNER"}
    assert flags["--speculative-config"]["enable_adaptive_verification"] is False


@pytest.mark.parametrize(("hw", "platform_env", "moe"), [
    ("h200", set(), "marlin"),
    ("b200", set(), "flashinfer_trtllm"),
    ("mi355x", AITER_ENV, "aiter"),
    ("mi300x", {"VLLM_ROCM_USE_AITER"}, "aiter_triton_mxfp4_bf16"),
])
def test_gpu_profiles_render_their_own(hw: str, platform_env: set[str], moe: str) -> None:
    env, _, flags = dry_run(f"+hw={hw}")
    assert set(env) == platform_env | DSPARK_ENV
    assert flags["--moe-backend"] == moe
    assert flags["--tensor-parallel-size"] == "8"


def test_cpu_profile_renders_the_cpu_quirks() -> None:
    from dspark_cli.machine.detect import installed_libraries

    env, positional, flags = dry_run("+hw=cpu")
    preload = ":".join(installed_libraries(["libtcmalloc_minimal.so.4", "libiomp5.so"]))
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
                   **({"LD_PRELOAD": preload} if preload else {})}
    assert positional[-1].endswith("tiny-llama-v1")
    assert flags["--dtype"] == "float32" and flags["--enforce-eager"] is True
    assert "--speculative-config" not in flags and "--moe-backend" not in flags


def test_no_hw_on_a_machine_without_gpus_is_cpu(tmp_path: Path) -> None:
    no_gpu = fake_host(tmp_path, "no-gpu")
    assert dry_run(env=no_gpu) == dry_run("+hw=cpu", env=no_gpu)


def test_no_hw_on_a_machine_with_h200s_is_h200(tmp_path: Path) -> None:
    h200 = fake_host(tmp_path, "h200x8")
    assert dry_run(env=h200) == dry_run("+hw=h200", env=h200) != dry_run("+hw=cpu", env=h200)


def test_host_and_port_render_only_when_not_vllms_defaults() -> None:
    _, _, flags = dry_run("+hw=mi350x", "server.port=8000")
    assert "--port" not in flags and "--host" not in flags
    _, _, flags = dry_run("+hw=mi350x", "server.port=9001", "server.host=127.0.0.1")
    assert flags["--port"] == "9001" and flags["--host"] == "127.0.0.1"


def test_hostile_values_are_quoted_for_the_shell() -> None:
    path = "/models/it's a \"model\" $(rm -rf ~)"
    # Hydra's override grammar: a double-quoted string escapes its quotes with a backslash.
    hydra_path = path.replace('"', '\\"')
    extra = '+serving.extra_args.override_generation_config={stop:"it\'s \\"done\\""}'
    done = run_dspark("serve", "+hw=mi350x", f'model.path="{hydra_path}"', extra, "--dry-run")
    assert done.returncode == 0, done.stderr
    _, positional, flags = parse_script(done.stdout)
    assert positional[-1] == path
    assert flags["--override-generation-config"] == {"stop": 'it\'s "done"'}


def test_json_plan_matches_the_shell_plan() -> None:
    done = run_dspark("serve", "+hw=mi350x", "--dry-run", "--json")
    data = json.loads(done.stdout)
    _, positional, _ = parse_script(SEED.read_text())
    assert data["argv"][:3] == positional
    assert data["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    # No hardware and no local checkpoint in a dry run here: those checks are skipped. The
    # hardware profile pins no software (the image group does): nothing to refuse for it.
    machine_rules = {r.id for r in RULES if r.needs_machine}
    assert {f["rule"] for f in data["preflight"] if f["status"] == "skipped"} == {
        *machine_rules, "checkpoint-structure", "checkpoint-confidence-head"}
    pins = next(f for f in data["preflight"] if f["rule"] == "runtime-pins")
    assert pins["status"] == "passed" and pins["message"] == "no runtime pins set"
    assert "aiter-importable" in machine_rules


def test_secrets_never_print() -> None:
    done = run_dspark("serve", "+hw=mi350x", "+hw.env.HF_TOKEN=hf_secret_value", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "hf_secret_value" not in done.stdout
    assert 'export HF_TOKEN="${HF_TOKEN:?' in done.stdout


def test_dry_run_imports_neither_torch_nor_vllm() -> None:
    code = ("import sys; from dspark_cli.cli import main; rc = main(['serve', '+hw=mi350x', "
            "'--dry-run']); heavy = [m for m in ('torch', 'vllm') if m in sys.modules]; "
            "print(rc, heavy)")
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stderr


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    done = run_dspark("serve", "+hw=mi350x", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0
    assert list(tmp_path.iterdir()) == []


def fresh_home(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An empty HOME of the test's own, and the variables that point there: what dspark writes
    under a user's home shows in it, and no other worker writes there (the session's HOME is
    shared by both workers, the real one by everything else on the machine)."""
    home = tmp_path / "home"
    home.mkdir()
    return home, {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
                  "XDG_CONFIG_HOME": str(home / ".config"),
                  "XDG_DATA_HOME": str(home / ".local/share"),
                  "XDG_STATE_HOME": str(home / ".local/state")}


def test_a_dry_run_writes_nothing_into_the_users_home(tmp_path: Path) -> None:
    home, env = fresh_home(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    cache = seed_cache(tmp_path / "cache")
    env["DSPARK_CACHE_DIR"] = str(cache)
    cached = set(cache.rglob("*"))
    done = run_dspark("serve", "+hw=cpu", "--dry-run", cwd=work, env=env)
    assert done.returncode == 0, done.stderr
    # nothing but the installed vLLM's option table, once per vLLM version
    written = set(cache.rglob("*")) - cached
    assert all(p.is_relative_to(cache / "vllm-options") for p in written), written
    again = run_dspark("serve", "+hw=cpu", "--dry-run", cwd=work, env=env)
    assert again.returncode == 0, again.stderr
    assert set(cache.rglob("*")) == cached | written, "the dry run wrote into DSPARK_CACHE_DIR"
    assert list(home.rglob("*")) == []


@pytest.mark.vllm
def test_the_tiny_model_is_made_outside_the_users_home(tmp_path: Path) -> None:
    home, env = fresh_home(tmp_path)
    code = ("from tests.conftest import compose_typed; "
            "from dspark_cli.deploy.start import ensure_model; "
            "cfg = compose_typed(['+hw=cpu']); ensure_model(cfg); print(cfg.model.path)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=300, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    path = Path(done.stdout.strip().splitlines()[-1])
    assert path.is_relative_to(session_root()), path
    assert (path / "config.json").is_file()
    assert list(home.rglob("*")) == []
