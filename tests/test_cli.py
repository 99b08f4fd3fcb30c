"""The dispatcher's contract: commands, Hydra features kept, errors mapped to exit codes."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_cli.errors import MEANING, ExitCode, exit_codes_help
from tests.conftest import REPO, dspark_argv, run_dspark

README = REPO / "README.md"


def test_top_help_lists_every_command() -> None:
    done = run_dspark("--help")
    assert done.returncode == 0
    for name in ("serve", "verify-checkpoint", "smoke", "bench"):
        assert f"  {name}" in done.stdout
    assert exit_codes_help() in done.stdout


def test_exit_codes_come_from_one_table() -> None:
    """Both help texts and the README's table say every code of `ExitCode`, and only those."""
    line = exit_codes_help()
    assert all(f"{int(c)} {MEANING[c]}" in line for c in ExitCode)
    assert run_dspark("report", "--help").stdout.count(line) == 1
    table = README.read_text().split("## Exit codes")[1].split("\n## ")[0]
    documented = {int(row.split("|")[1]) for row in table.splitlines()
                  if row.startswith("| ") and row.split("|")[1].strip().isdigit()}
    assert documented == {int(c) for c in ExitCode}


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
    assert "+hw=NAME" in done.stdout and "    mi350x  8 x AMD Instinct MI350X" in done.stdout
    listed = done.stdout.split("speculative=NAME:")[1].split("compilation=NAME:")[0]
    # Options with the same help line share one line, their names joined by `|`.
    names = {n for line in listed.splitlines() if line.strip()
             for n in line.split()[0].split("|")}
    assert names == {"draft_model", "dspark_adaptive", "dspark_draft", "dspark_draft_adaptive",
                     "dspark_fixed", "ngram", "none"}


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
    (["hw.args.tensor_paralel_size=8"], "did you mean `hw.args.tensor_parallel_size`"),
    (["compilation=nope"], "compilation has no option 'nope'"),
    (["serving.args.max_num_seqs=lots"], "max_num_seqs takes an integer, and 'lots' is not one"),
    (["+hw.extra_key=1"], "unknown config key `hw.extra_key`"),
    (["+hw.args.tensor_parallel=1"], "did you mean tensor_parallel_size"),
    (["hw.platform=tpu"], "hw.platform is one of rocm, cuda, cpu, not 'tpu'"),
    (["model.path=("], "cannot read the override 'model.path=('"),
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
    assert "hw has no option 'tpu_v5'" in done.stderr


@pytest.mark.parametrize("args", [["--info"], ["--info", "defaults"], ["-i", "config"]])
def test_info_prints_hydras_information(args: list[str]) -> None:
    done = run_dspark("serve", "+hw=mi350x", *args)
    assert done.returncode == 0, done.stderr
    assert "Defaults List" in done.stdout or "Config" in done.stdout


def test_hydras_short_flags_pass_through_and_unknown_ones_are_refused() -> None:
    done = run_dspark("serve", "+hw=mi350x", "-c", "job")
    assert done.returncode == 0, done.stderr
    assert "name: mi350x" in done.stdout
    refused = run_dspark("serve", "+hw=mi350x", "-x", "--dry-run")
    assert refused.returncode == 2
    assert "unknown flag '-x'" in refused.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """`dspark bench ... --json | head -1`, with a real pipe: the plan is far larger than the
    pipe, so the writer meets the closed end."""
    read_end, write_end = os.pipe()
    argv = dspark_argv("bench", "bench=speed_bench_throughput_1k", "+hw=mi350x", "--dry-run",
                       "--json")
    proc = subprocess.Popen(argv, stdout=write_end, stderr=subprocess.PIPE, cwd=REPO)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        first = reader.readline()
    _, stderr = proc.communicate(timeout=120)
    assert first == b"{\n"
    assert proc.returncode == 128 + signal.SIGPIPE, stderr
    assert b"BrokenPipe" not in stderr and b"Traceback" not in stderr
    assert b"unexpected" not in stderr


@pytest.fixture(scope="module")
def completion_script() -> str:
    done = run_dspark("serve", "--shell-completion", "install=bash")
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("-F hydra_bash_completion dspark")
    return done.stdout


def complete(script: str, line: str) -> list[str]:
    """What bash offers for `line` (cursor at its end), through the installed function."""
    words = line.split() + ([""] if line.endswith(" ") else [])
    shell = (f'eval "$SCRIPT"; COMP_LINE={shlex.quote(line)}; COMP_POINT=${{#COMP_LINE}}; '
             f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); "
             f"COMP_CWORD={len(words) - 1}; hydra_bash_completion; "
             'printf "%s\\n" "${COMPREPLY[@]}"')
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": path, "SCRIPT": script})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # the shell would print it onto the command line being typed
    return done.stdout.split()


@pytest.mark.parametrize(("line", "expected"), [
    ("dspark serve spec", {"speculative="}),
    ("dspark serve hw=", {"hw=mi350x", "hw=h200", "hw=cpu"}),
    ("dspark serve --dry-run speculative=dspark_a", {"speculative=dspark_adaptive"}),
    ("dspark smoke +hw=mi35", {"+hw=mi350x", "+hw=mi355x"}),
    ("dspark bench bench=", {"bench=cpu", "bench=speed_bench_throughput_1k"}),
    ("dspark se", {"serve"}),
    ("dspark serve --dr", {"--dry-run"}),
    ("dspark compare --", {"--json", "--out", "--help"}),
])
def test_installed_bash_completion_completes_groups_and_options(
        completion_script: str, line: str, expected: set[str]) -> None:
    assert expected <= set(complete(completion_script, line))


def test_completion_offers_a_commands_own_flags_not_config_keys(
        completion_script: str) -> None:
    offered = set(complete(completion_script, "dspark verify-checkpoint --"))
    assert {"--json", "--hash", "--manifest", "--write-manifest", "--workers"} <= offered
    assert not any("=" in o for o in offered)


@pytest.mark.parametrize("line", ["dspark report ", "dspark compare runs/a ", "dspark report --"])
def test_completing_a_command_without_config_prints_no_error(
        completion_script: str, line: str) -> None:
    assert not any("unknown" in o for o in complete(completion_script, line))
