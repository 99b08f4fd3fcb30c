"""The dispatcher's contract: commands, Hydra features kept, errors mapped to exit codes."""

from __future__ import annotations

import pytest

from tests.conftest import run_dspark


def test_top_help_lists_every_command() -> None:
    done = run_dspark("--help")
    assert done.returncode == 0
    for name in ("serve", "verify-checkpoint", "smoke", "bench"):
        assert f"  {name}" in done.stdout


def test_no_command_is_a_usage_error() -> None:
    assert run_dspark().returncode == 2


def test_mistyped_command_gets_did_you_mean() -> None:
    done = run_dspark("serv", "+hw=cpu")
    assert done.returncode == 2
    assert "Did you mean `dspark serve`?" in done.stderr


def test_command_help_lists_flags_groups_and_options() -> None:
    done = run_dspark("serve", "--help")
    assert done.returncode == 0
    assert "--dry-run" in done.stdout
    assert "hw: b200, cpu, h200, mi300x, mi350x, mi355x" in done.stdout
    assert "speculative: draft_model, dspark_adaptive, dspark_fixed, ngram, none" in done.stdout


def test_cfg_job_prints_the_composed_config() -> None:
    done = run_dspark("serve", "+hw=mi350x", "--cfg", "job", "serving.args.max_num_seqs=512")
    assert done.returncode == 0, done.stderr
    assert "max_num_seqs: 512" in done.stdout and "name: mi350x" in done.stdout


def test_flags_may_come_before_or_after_overrides() -> None:
    a = run_dspark("serve", "--dry-run", "+hw=mi350x", "speculative=none")
    b = run_dspark("serve", "+hw=mi350x", "speculative=none", "--dry-run")
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout


def test_hw_without_plus_means_plus() -> None:
    assert run_dspark("serve", "hw=mi350x", "--dry-run").stdout == run_dspark(
        "serve", "+hw=mi350x", "--dry-run").stdout


def test_multirun_dry_run_plans_each_job() -> None:
    done = run_dspark("serve", "-m", "+hw=mi350x", "speculative=none,dspark_fixed", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("vllm serve /models/DeepSeek-V4-Flash-DSpark") == 2


@pytest.mark.parametrize(("args", "needle"), [
    (["hw.args.tensor_paralel_size=8"], "Key 'tensor_paralel_size' not in 'HwArgs'"),
    (["compilation=nope"], "Could not find 'compilation/nope'"),
    (["serving.args.max_num_seqs=lots"], "Value 'lots' of type 'str' could not be converted"),
    (["+hw.extra_key=1"], "unknown config key `hw.extra_key`"),
    (["+hw.args.tensor_parallel=1"], "did you mean tensor_parallel_size"),
    (["hw.platform=tpu"], "Invalid value 'tpu'"),
    (["model.path=("], "Error parsing override"),
    (["--no-such-flag"], "unknown flag '--no-such-flag'"),
])
def test_bad_input_is_a_usage_error_without_traceback(args: list[str], needle: str) -> None:
    done = run_dspark("serve", "+hw=mi350x", *args, "--dry-run")
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_hw_profile_is_a_usage_error() -> None:
    done = run_dspark("serve", "+hw=tpu_v5", "--dry-run")
    assert done.returncode == 2
    assert "Could not find 'hw/tpu_v5'" in done.stderr
