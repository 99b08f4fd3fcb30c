"""No secret is ever written or printed: planted through every route, looked for everywhere.

Before, `+hw.env.HF_TOKEN=...` was plain in Hydra's `.hydra/*.yaml` and `+serving.extra_args.
api_key=...` plain in config.yaml and the dry run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from dspark_cli.errors import UsageError
from dspark_cli.launch import secrets
from dspark_cli.launch.plan import build_plan
from dspark_cli.launch.render import plan_dict, shell_script
from dspark_cli.launch.secrets import hide
from dspark_cli.server.process import free_port
from tests.conftest import compose_typed, dspark_env, run_dspark
from tests.smoke_support import smoke_args, smoke_argv

# route -> a planted value (long and unique, so a hit is a leak)
PLANTED = {
    "+hw.env.HUGGING_FACE_HUB_TOKEN": "hwtok-1a2b3c4d5e",
    "+serving.env.MY_PASSWORD": "servpw-9f8e7d6c5b",
    "+model.env.Some_Credential": "modcred-13572468",
    "+speculative.env.api_key_extra": "speckey-24681357",
    "+compilation.env.db_secret": "compsec-11223344",
    "+serving.extra_args.api_key": "sk-apikey-55667788",
    "+serving.extra_args.hf-token": "hf-flagtok-99aa88bb",
}
URL_PASSWORD = "urlpw-77ccdd99"
ALL = [*PLANTED.values(), URL_PASSWORD]


def planted_overrides() -> list[str]:
    return [f"{k}={v}" for k, v in PLANTED.items()] + [
        f"model.path=https://me:{URL_PASSWORD}@models.example.invalid/m"]


def leaks(text: str) -> list[str]:
    return [v for v in ALL if v in text]


def files_under(root: Path) -> dict[Path, str]:
    return {p: p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file()}


def test_the_dry_run_refers_to_variables_and_stays_runnable(tmp_path: Path) -> None:
    result = run_dspark("serve", "+hw=mi350x", *planted_overrides(), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert leaks(result.stdout + result.stderr) == []
    script = result.stdout
    assert 'export VLLM_API_KEY="${VLLM_API_KEY:?' in script
    assert 'export HF_TOKEN="${HF_TOKEN:?' in script
    assert "--api-key" not in script and "--hf-token" not in script
    assert 'vllm serve "https://me:${DSPARK_URL_PASSWORD_1}@models.example.invalid/m"' in script
    # runnable: with the variables set, bash runs it and vLLM gets the real values
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "vllm").write_text('#!/bin/sh\necho "ARGV $2 KEY=$VLLM_API_KEY"\n')
    (fake_bin / "vllm").chmod(0o755)
    env = {"PATH": f"{fake_bin}:{os.environ['PATH']}", "VLLM_API_KEY": "k1",
           "HF_TOKEN": "t1", "HUGGING_FACE_HUB_TOKEN": "t2", "MY_PASSWORD": "p",
           "Some_Credential": "c", "api_key_extra": "a", "db_secret": "d",
           "DSPARK_URL_PASSWORD_1": "pw"}
    ran = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "ARGV https://me:pw@models.example.invalid/m KEY=k1"


def test_the_json_plan_and_cfg_job_redact() -> None:
    result = run_dspark("serve", "+hw=mi350x", *planted_overrides(), "--dry-run", "--json")
    assert result.returncode == 0 and leaks(result.stdout + result.stderr) == []
    assert json.loads(result.stdout)["env"]["VLLM_API_KEY"] == "<redacted>"
    shown = run_dspark("serve", "+hw=mi350x", *planted_overrides(), "--cfg", "job")
    assert shown.returncode == 0 and leaks(shown.stdout + shown.stderr) == []
    assert "${oc.env:DSPARK_SECRET_HW_ENV_HUGGING_FACE_HUB_TOKEN}" in shown.stdout
    resolved = run_dspark("serve", "+hw=mi350x", *planted_overrides(), "--cfg", "job",
                          "--resolve")
    assert resolved.returncode == 2 and leaks(resolved.stdout + resolved.stderr) == []


def test_vllm_gets_secret_options_through_its_environment() -> None:
    overrides = ["+hw=mi350x", "+serving.extra_args.api_key=sk-one-12345678",
                 "+serving.extra_args.hf_token=hf-one-12345678"]
    plan = build_plan(compose_typed(overrides))
    assert plan.env_map["VLLM_API_KEY"] == "sk-one-12345678"
    assert plan.env_map["HF_TOKEN"] == "hf-one-12345678"
    assert not [a for a in plan.argv if "one-1234" in a]
    assert "one-1234" not in shell_script(plan) + json.dumps(plan_dict(plan))


@pytest.mark.parametrize("overrides", [
    ["+serving.extra_args.api_key=[a1234567,b1234567]"],
    ["+hw.env.HF_TOKEN=hf-env-12345678", "+serving.extra_args.hf_token=hf-arg-12345678"],
])
def test_contradictory_secrets_are_refused_without_showing_them(overrides: list[str]) -> None:
    with pytest.raises(UsageError) as e:
        build_plan(compose_typed(["+hw=mi350x", *overrides]))
    assert "1234567" not in e.value.message


@pytest.mark.parametrize("override", [
    "+hw.env={HF_TOKEN:dicttok-12345678}",
    "+serving.extra_args={api_key:dictkey-12345678}",
    "+hw.env.HF_TOKEN=sweep-a-12345678,sweep-b-12345678",
    "server.url=[http://u:listpw-12345678@h]",
])
def test_a_secret_inside_a_dict_list_or_sweep_is_refused(override: str) -> None:
    with pytest.raises(UsageError) as e:
        hide([override])
    assert "12345678" not in e.value.message
    result = run_dspark("serve", "+hw=mi350x", override, "--dry-run")
    assert result.returncode == 2 and "12345678" not in result.stdout + result.stderr


def test_overrides_refer_to_the_environment() -> None:
    out, hidden = hide(["+hw.env.HF_TOKEN=abc-12345678", "server.url=http://u:pw-1234567@h:1",
                        "server.port=9000", "+serving.extra_args.API-KEY=k-12345678"])
    assert hidden and out[2] == "server.port=9000"
    assert out[0] == "+hw.env.HF_TOKEN=${oc.env:DSPARK_SECRET_HW_ENV_HF_TOKEN}"
    assert os.environ["DSPARK_SECRET_HW_ENV_HF_TOKEN"] == "abc-12345678"
    assert "pw-1234567" not in out[1] and "k-12345678" not in out[3]


def test_redact_and_scrub() -> None:
    data = {"hw": {"env": {"X_TOKEN": "t-12345678", "PATH": "/bin"}},
            "serving": {"extra_args": {"api-key": ["k-12345678"]}},
            "server": {"url": "http://me:pw-12345678@host:1"}}
    assert secrets.redact(data) == {
        "hw": {"env": {"X_TOKEN": "<redacted>", "PATH": "/bin"}},
        "serving": {"extra_args": {"api-key": ["<redacted>"]}},
        "server": {"url": "http://me:<redacted>@host:1"}}
    scrub = secrets.Scrubber(secrets.values_in(data))
    assert scrub("a t-12345678 b k-12345678 c pw-12345678") == "a <redacted> b <redacted> c " \
        "<redacted>"


def test_every_secret_carrying_vllm_option_is_known() -> None:
    """vLLM's options that carry a secret (by their parser's names), and no more."""
    from dspark_cli.launch.vllm_options import table

    carrying = {d for d, e in table().items() if e["kind"] in ("value", "list")
                and (d.endswith(("_key", "_token")) or (secrets.is_secret_name(d)
                     and not d.endswith(("_tokens", "_tokens_details", "keyfile"))))
                and not d.startswith(("tokenizer", "max_", "num_"))
                and "token_threshold" not in d and "token_ids" not in d}
    assert carrying == set(secrets.SECRET_OPTIONS)


def _smoke(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    port = free_port()
    return run_dspark(*smoke_args(port, ["--scenario", "healthy", "--k", "3"],
                                  *planted_overrides(), *extra), cwd=tmp_path, timeout=180)


def test_nothing_dspark_or_hydra_writes_or_prints_holds_a_secret(tmp_path: Path) -> None:
    done = _smoke(tmp_path)
    assert done.returncode == 0, done.stderr
    assert leaks(done.stdout + done.stderr) == []
    written = files_under(tmp_path / "runs")
    names = {p.name for p in written}
    assert {"config.yaml", "hydra.yaml", "overrides.yaml", "launch.sh", "provenance.json",
            "smoke.json"} <= names
    assert {str(p): leaks(t) for p, t in written.items() if leaks(t)} == {}
    overrides = next(t for p, t in written.items() if p.name == "overrides.yaml")
    assert "oc.env:DSPARK_SECRET_SERVING_EXTRA_ARGS_API_KEY" in overrides


def test_a_multirun_writes_no_secret(tmp_path: Path) -> None:
    done = _smoke(tmp_path, "-m", "logs.context_lines=10,11")
    assert done.returncode == 0, done.stderr
    assert leaks(done.stdout + done.stderr) == []
    written = files_under(tmp_path / "runs")
    assert any(p.name == "multirun.yaml" for p in written)
    assert sum(p.name == "smoke.json" for p in written) == 2
    assert {str(p): leaks(t) for p, t in written.items() if leaks(t)} == {}


def test_a_secret_typed_into_a_config_file_is_redacted_in_hydras_copies(tmp_path: Path) -> None:
    confdir = tmp_path / "myconf" / "hw"
    confdir.mkdir(parents=True)
    cpu = (Path(__file__).resolve().parents[1] / "conf" / "hw" / "cpu.yaml").read_text()
    space = 'VLLM_CPU_KVCACHE_SPACE: "1"'
    (confdir / "mine.yaml").write_text(cpu.replace(space,
                                                   f"{space}\n    FILE_TOKEN: filetok-31415926"))
    port = free_port()
    argv = smoke_argv(port, ["--scenario", "healthy", "--k", "3"], "-cd",
                      str(tmp_path / "myconf"), "-m", "logs.context_lines=10,11")
    argv[argv.index("+hw=cpu")] = "+hw=mine"
    done = subprocess.run(argv, cwd=tmp_path, env=dspark_env(), capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    assert "filetok-31415926" not in done.stdout + done.stderr
    written = files_under(tmp_path / "runs")
    assert [p.name for p, t in written.items() if "filetok-31415926" in t] == []
    configs = [t for p, t in written.items() if p.name == "config.yaml"]
    assert configs and all("FILE_TOKEN: <redacted>" in t for t in configs)


def test_the_child_gets_secrets_only_under_their_real_names(monkeypatch) -> None:
    from dspark_cli.deploy.start import child_environ

    monkeypatch.setenv("DSPARK_SECRET_HW_ENV_HF_TOKEN", "moved-12345678")
    monkeypatch.setenv("PATH_LIKE_THING", "kept")
    env = child_environ()
    assert "DSPARK_SECRET_HW_ENV_HF_TOKEN" not in env and env["PATH_LIKE_THING"] == "kept"


def test_overrides_without_a_secret_pass_unchanged() -> None:
    plain = ["+hw=mi350x", "server.port=9000", "serving.args.max_num_batched_tokens=8"]
    assert hide(plain) == (plain, False)


@pytest.mark.parametrize("unit", ["a", "a://b:", "x://u:pw-1234@h/ ", ":", "a+b.c-d"])
def test_the_filter_is_linear_a_1_mb_line_takes_well_under_a_second(unit: str) -> None:
    """The old URL pattern tried a scheme from every position: 100 KB of letters took 20 s,
    1 MB more than 10 minutes. benchmarks/secret_filter_speed.py has the figures."""
    import time

    text = (unit * (1_000_000 // len(unit) + 1))[:1_000_000]
    scrub = secrets.Scrubber(["pw-1234"])
    start = time.perf_counter()
    out = scrub(text)
    assert time.perf_counter() - start < 2.0  # ~0.2 s here on a loaded 2-core machine
    assert "pw-1234" not in out


@pytest.mark.parametrize(("text", "found"), [
    ("https://me:pw@h", ["pw"]), ("git+ssh://u:p1@h a://:p2@h/", ["p1", "p2"]),
    ("1://u:p@h", []), ("x1://u:p@h", ["p"]), ("see-https://u:p@h", ["p"]),
    ("https://u:${VAR}@h", []), ("https://u:$(VAR)@h", []), ("https://u:p/x@h", []),
    ("https://u:p h@h", []), ("https://u:p", []), ("a://u:b://v:c@h", ["c"]),
    ("https://u:p@a://v:q@h", ["p", "q"]), ("https://u:p:q@h", ["p:q"]),
])
def test_url_passwords_are_found_as_the_pattern_defines_them(text: str, found: list[str]) -> None:
    assert secrets.url_passwords(text) == found
    redacted = secrets.redact_urls(text)
    assert not any(p in redacted.replace(secrets.REDACTED, "") for p in found if len(p) > 1)


def test_url_passwords_match_the_old_pattern_on_random_text() -> None:
    """The linear finder is the old pattern's meaning (`[A-Za-z][A-Za-z0-9+.-]*://user:` then
    a password before `@`, no variable reference), checked on seeded random texts."""
    import random
    import re

    old = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(?!\$[{(])([^/\s@]+)(?=@)")
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice("a1+:/@${( \nZ.-_") for _ in range(rng.randint(0, 30)))
        assert secrets.url_passwords(text) == [m[2] for m in old.finditer(text)], text
        assert secrets.redact_urls(text) == old.sub(lambda m: m[1] + secrets.REDACTED, text)
