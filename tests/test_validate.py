"""`dspark validate` without vLLM: the real CLI, the real tiny checkpoint, real pytest for the
focused tests, and the fake vLLM server (a real process speaking real HTTP) for the smoke.
The run on real vLLM is tests/test_validate_vllm.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from dspark_cli.report import markdown
from dspark_cli.server.process import free_port
from tests.conftest import (
    REPO,
    default_signals,
    dspark_argv,
    dspark_env,
    run_dspark,
    wait_until,
)
from tests.doubles.fake_vllm import SCRIPT
from tests.smoke_support import fake_pid, port_free
from tests.test_prepare_speed_bench import prepared

GOLDEN = REPO / "tests" / "data" / "golden"


def validate_argv(tmp_path: Path, *overrides: str, scenario: str = "healthy") -> list[str]:
    port = free_port()
    fake = ",".join([sys.executable, str(SCRIPT), "--port", str(port), "--scenario", scenario,
                     "--k", "3"])
    return dspark_argv("validate", "+hw=cpu", f"server.port={port}", f"server.command=[{fake}]",
                       "server.ready_timeout_s=10", "smoke.request_timeout_s=3",
                       "validate.bench=null", "validate.accuracy=null",
                       f"hydra.run.dir={tmp_path / 'run'}", *overrides)


def run_validate(tmp_path: Path, *overrides: str, flags: tuple[str, ...] = (),
                 scenario: str = "healthy") -> tuple[subprocess.CompletedProcess[str], Path]:
    done = subprocess.run([*validate_argv(tmp_path, *overrides, scenario=scenario), *flags],
                          cwd=tmp_path, env=dspark_env(), capture_output=True, text=True,
                          timeout=180)
    assert "Traceback" not in done.stderr, done.stderr
    return done, tmp_path / "run"


def stages(run: Path) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in json.loads((run / "validate.json").read_text())["stages"]}


def source_tree(tmp_path: Path, failing: bool = False) -> Path:
    """A stand-in for a vLLM checkout: a tests folder pytest runs node ids in."""
    src = tmp_path / "src"
    (src / "tests").mkdir(parents=True)
    body = ("import pytest\n\ndef test_one():\n    assert 1 + 1 == 2\n\n"
            "def test_two():\n    assert " + ("False" if failing else "True") + "\n\n"
            "@pytest.mark.skip(reason='not on this machine')\ndef test_three():\n    pass\n")
    (src / "tests" / "test_focused.py").write_text(body)
    return src


def focused(src: Path) -> list[str]:
    return [f"validate.tests.source={src}",
            "validate.tests.node_ids=[tests/test_focused.py]"]


@pytest.mark.vllm  # the smoke stage makes the tiny model with torch
def test_every_stage_runs_and_the_report_is_the_records(tmp_path: Path) -> None:
    done, run = run_validate(tmp_path, *focused(source_tree(tmp_path)))
    assert done.returncode == 0, done.stderr
    st = stages(run)
    assert {n: s["status"] for n, s in st.items()} == {
        "checkpoint": "passed", "tests": "passed", "smoke": "passed", "bench": "skipped",
        "accuracy": "skipped"}
    text = (run / "report.md").read_text()
    assert done.stdout == text
    assert [line[3:] for line in text.splitlines() if line.startswith("## ")] == list(
        markdown.SECTIONS)
    tests = json.loads((run / "tests" / "tests.json").read_text())
    assert tests["counts"] == {"passed": 2, "failed": 0, "errors": 0, "skipped": 1}
    assert "Result: **passed** (0 errors, 0 failed, 2 passed, 1 skipped)." in text
    smoke = json.loads((run / "smoke" / "smoke.json").read_text())
    spec = smoke["counters"]["spec_decode"]
    assert spec["draft_tokens"] == spec["drafts"] * 3
    relation = f"{spec['draft_tokens']} = {spec['drafts']} x K=3"
    assert f"num_draft_tokens_total: {spec['draft_tokens']:>{len(str(spec['draft_tokens']))}}" \
        in text and relation in text
    ckpt = json.loads((run / "checkpoint" / "checkpoint.json").read_text())
    assert f"across {ckpt['num_shards']} safetensors shard" in text
    assert "Architecture: LlamaForCausalLM" in text
    report = json.loads((run / "report.json").read_text())
    assert report["smoke"]["counters"]["drafts"] == spec["drafts"]
    assert report["results"] is None and report["methodology"] is None

    # `dspark report` on the same directory: the same bytes, nothing else written.
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.name not in (
        "report.md", "report.json")}
    again = run_dspark("report", str(run))
    assert again.returncode == 0, again.stderr
    assert again.stdout == text and (run / "report.md").read_text() == text
    assert json.loads((run / "report.json").read_text()) == report
    assert {p: p.stat().st_mtime_ns for p in before} == before


@pytest.mark.vllm  # the smoke stage makes the tiny model with torch
def test_a_failed_stage_stops_the_run_unless_keep_going(tmp_path: Path) -> None:
    src = source_tree(tmp_path, failing=True)
    (tmp_path / "stop").mkdir()
    done, run = run_validate(tmp_path / "stop", *focused(src))
    assert done.returncode == 1, done.stderr
    st = stages(run)
    assert st["tests"]["status"] == "failed" and "1 failed" in st["tests"]["detail"]
    assert st["smoke"]["status"] == "not_run" and st["bench"]["status"] == "not_run"
    assert not (run / "smoke").exists()
    text = (run / "report.md").read_text()
    assert "Result: **failed**" in text and "Not run: no smoke record" in text

    (tmp_path / "keep").mkdir()
    done, run = run_validate(tmp_path / "keep", *focused(src), flags=("--keep-going",))
    assert done.returncode == 1, done.stderr
    assert {n: s["status"] for n, s in stages(run).items()} == {
        "checkpoint": "passed", "tests": "failed", "smoke": "passed", "bench": "skipped",
        "accuracy": "skipped"}


@pytest.mark.vllm  # the smoke stage makes the tiny model with torch
def test_the_exit_code_is_the_worst_stage(tmp_path: Path) -> None:
    """The smoke's server never gets healthy (exit 3) after a failed focused test (exit 1)."""
    done, run = run_validate(tmp_path, *focused(source_tree(tmp_path, failing=True)),
                             "server.ready_timeout_s=1", flags=("--keep-going",),
                             scenario="never_healthy")
    assert done.returncode == 3, done.stderr
    st = stages(run)
    assert (st["tests"]["exit_code"], st["smoke"]["exit_code"]) == (1, 3)


@pytest.mark.vllm  # the smoke stage makes the tiny model with torch
def test_ctrl_c_tears_down_and_still_writes_what_was_measured(tmp_path: Path) -> None:
    """Ctrl-C while the smoke's request hangs: the server goes, the run ends with 130, and the
    checkpoint stage's record and the report are there."""
    argv = validate_argv(tmp_path, "smoke.request_timeout_s=120", scenario="hung_request")
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err:
        proc = subprocess.Popen(argv, cwd=tmp_path, env=dspark_env(), stdout=subprocess.DEVNULL,
                                stderr=err, text=True, preexec_fn=default_signals)
    try:
        wait_until(lambda: "requesting" in stderr.read_text(), 90, "the smoke's request")
        pid = fake_pid(tmp_path / "run" / "smoke" / "server.log")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130, stderr.read_text()
    finally:
        proc.kill()
    assert "Traceback" not in stderr.read_text()
    st = stages(tmp_path / "run")
    assert st["smoke"]["exit_code"] == 130 and st["smoke"]["detail"] == "interrupted"
    assert st["bench"]["status"] == "not_run"
    assert st["checkpoint"]["status"] == "passed"
    text = (tmp_path / "run" / "report.md").read_text()
    assert "| smoke | failed | interrupted |" in text
    wait_until(lambda: not psutil.pid_exists(pid)
               or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 10, "the fake to end")
    port = int(next(a for a in argv if a.startswith("server.port=")).split("=")[1])
    assert port_free(port)


def test_dry_run_prints_the_plan_of_every_stage(tmp_path: Path) -> None:
    pin = prepared(tmp_path)
    done = run_dspark("validate", "+hw=mi350x", "bench=speed_bench_throughput_1k", *pin,
                      "--dry-run", "--commands", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for stage in ("1. checkpoint: verify-checkpoint of /models/DeepSeek-V4-Flash-DSpark",
                  "2. focused tests: not run", "3. smoke: boot this launch",
                  "4. bench: protocol speed_bench_throughput_1k",
                  "5. accuracy: lm_eval task dspark_gsm8k on ", "6. report: "):
        assert stage in out
    assert ("against each arm of bench.arms (none, dspark_fixed, dspark_adaptive) on its first "
            "bench cell's server (its own boot if the bench does not reach it); each arm's "
            "difference to none judged at +-0.02") in out
    seed = (GOLDEN / "mi350x.sh").read_text()
    assert "\n".join(f"   {line}" for line in seed.rstrip("\n").splitlines()) in out
    assert "cell 21/21: dspark_adaptive-c4" in out
    assert "num_shards=48" in out and "K=7 (exact)" in out


def test_dry_run_plans_focused_tests_and_skips_the_bench(tmp_path: Path) -> None:
    done = run_dspark("validate", "+hw=cpu", "validate.bench=null", *focused(tmp_path),
                      "--dry-run")
    assert done.returncode == 0, done.stderr
    assert f"2. focused tests: in {tmp_path}" in done.stdout
    assert "-m pytest -q -p no:cacheprovider" in done.stdout
    assert "4. bench: skipped (validate.bench=null)" in done.stdout
    assert "(none, draft_model) on its own server, booted in turn; " in done.stdout


@pytest.mark.vllm  # the smoke stage makes the tiny model with torch
def test_a_missing_test_tree_is_a_usage_error_in_its_stage(tmp_path: Path) -> None:
    done, run = run_validate(tmp_path, *focused(tmp_path / "nowhere"))
    assert done.returncode == 2, done.stderr
    st = stages(run)
    assert st["tests"]["exit_code"] == 2 and "is not a directory" in st["tests"]["detail"]
    assert st["smoke"]["status"] == "not_run"


@pytest.mark.vllm  # the smoke stage makes the tiny model with torch
def test_without_the_bench_each_arm_is_scored_on_a_boot_of_its_own(tmp_path: Path) -> None:
    """The accuracy stage's own boots (the bench lends it no cell): real lm_eval against each
    arm's server (the fake one answers no GSM8K question), one boot per arm, its log there."""
    argv = [a for a in validate_argv(tmp_path, "validate.accuracy.limit=2",
                                     "validate.accuracy.max_gen_toks=8")
            if a != "validate.accuracy=null"]
    done = subprocess.run(argv, cwd=tmp_path, env=dspark_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "run"
    assert stages(run)["accuracy"]["status"] == "passed"
    acc = json.loads((run / "accuracy" / "accuracy.json").read_text())
    for arm in acc["arms"]:
        assert (arm["status"], arm["score"], arm["documents"], arm["cell"]) == (
            "scored", 0.0, [0, 1], None)
        log = (run / "accuracy" / "arms" / arm["arm"] / "server.log").read_text()
        assert log.count("POST /v1/completions") == 2  # lm_eval asked this arm's own server
    assert [a["arm"] for a in acc["arms"]] == ["none", "draft_model"]
    assert done.stderr.count("accuracy: none: booting its server") == 1
