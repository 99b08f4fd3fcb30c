"""Config mistakes a person can act on: one paragraph with dspark's prefix, the override, what is
wrong and what was meant, the same with or without `--dry-run`; never Hydra's search path, its
`In 'launch'`, its HYDRA_FULL_ERROR advice or OmegaConf's node types. Exit 2, nothing started
and nothing written. The CLI is called in-process, in a directory of the test's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark_cli.cli import main

# What no message may carry: Hydra's and OmegaConf's internals.
INTERNALS = ("Config search path", "provider=", "HYDRA_FULL_ERROR", "In 'launch'", "In 'serve'",
             "reference_type", "object_type", "full_key", "Traceback", "Could not override")


def refused(capsys: pytest.CaptureFixture[str], where: Path, *argv: str) -> str:
    """stderr of `dspark <argv>`, checked to be one paragraph that exits 2 and writes nothing;
    the same with `--dry-run` added."""
    said = []
    for extra in ([], ["--dry-run"]):
        assert main([*argv, *extra]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        lines = captured.err.rstrip("\n").split("\n")
        assert lines[0].startswith("dspark: ") and len(lines) <= 2, captured.err
        assert all(line.startswith("  hint: ") for line in lines[1:]), captured.err
        assert not any(bad in captured.err for bad in INTERNALS), captured.err
        assert list(where.iterdir()) == []
        said.append(captured.err)
    assert said[0] == said[1]
    return said[0]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_unknown_hw_profile_names_the_close_ones_and_lists_all(
        capsys: pytest.CaptureFixture[str], here: Path) -> None:
    said = refused(capsys, here, "serve", "+hw=mi35x")
    assert "`+hw=mi35x`: hw has no option 'mi35x'" in said
    assert "did you mean `+hw=mi350x`" in said
    assert "b200, cpu, h200, mi300x, mi350x, mi355x" in said


def test_unknown_option_of_a_group_with_a_default(capsys: pytest.CaptureFixture[str],
                                                   here: Path) -> None:
    said = refused(capsys, here, "serve", "+hw=mi350x", "speculative=dspark_fixd")
    assert "did you mean `speculative=dspark_fixed`?" in said
    assert ("draft_model, dspark_adaptive, dspark_draft, dspark_draft_adaptive, dspark_fixed, "
            "ngram, none") in said


def test_a_mistyped_group_name(capsys: pytest.CaptureFixture[str], here: Path) -> None:
    said = refused(capsys, here, "serve", "+hw=mi350x", "spec=none")
    assert "did you mean `speculative=none`?" in said


@pytest.mark.parametrize(("override", "expected"), [
    ("serving.args.max_num_seqs=lots", "serving.args.max_num_seqs takes an integer, and 'lots' "
                                       "is not one"),
    ("serving.args.enable_lora=maybe", "serving.args.enable_lora takes true or false"),
    ("hw.platform=rocn", "hw.platform is one of rocm, cuda, cpu, not 'rocn'; did you mean "
                         "`hw.platform=rocm`?"),
])
def test_a_wrong_type_says_what_the_key_takes(capsys: pytest.CaptureFixture[str], here: Path,
                                              override: str, expected: str) -> None:
    said = refused(capsys, here, "serve", "+hw=mi350x", override)
    assert f"`{override}`" in said and expected in said


def test_a_key_under_the_wrong_node_points_to_where_it_lives(
        capsys: pytest.CaptureFixture[str], here: Path) -> None:
    said = refused(capsys, here, "serve", "+hw=mi350x", "serving.max_num_seqs=1")
    assert "`serving.max_num_seqs` is not a setting; did you mean " \
           "`serving.args.max_num_seqs=1`?" in said


@pytest.mark.parametrize(("flag", "override"), [
    (["--max-num-seqs", "512"], "`serving.args.max_num_seqs=512`"),
    (["--max-num-seqs=512"], "`serving.args.max_num_seqs=512`"),
    (["--port", "9000"], "`server.port=9000`"),
    (["--enable-chunked-prefill"], "`+serving.extra_args.enable_chunked_prefill=true`"),
])
def test_a_vllm_flag_typed_as_a_dspark_flag_names_the_override(
        capsys: pytest.CaptureFixture[str], here: Path, flag: list[str], override: str) -> None:
    said = refused(capsys, here, "serve", "+hw=mi350x", *flag)
    assert "is a `vllm serve` flag" in said and f"write {override} instead" in said


def test_a_mistyped_dspark_flag_gets_did_you_mean(capsys: pytest.CaptureFixture[str],
                                                  here: Path) -> None:
    said = refused(capsys, here, "serve", "+hw=mi350x", "--dryrun")
    assert "unknown flag '--dryrun' for `dspark serve`; did you mean --dry-run?" in said


def test_the_other_commands_say_it_the_same_way(capsys: pytest.CaptureFixture[str],
                                                here: Path) -> None:
    said = refused(capsys, here, "bench", "+hw=mi350x", "bench=speed_bench_1k")
    assert "did you mean `bench=speed_bench_throughput_1k`?" in said
    assert main(["compare", "--jsn", "a", "b"]) == 2
    assert "did you mean --json?" in capsys.readouterr().err


def test_a_comma_outside_a_sweep_says_how_to_write_each_meaning(
        capsys: pytest.CaptureFixture[str], here: Path) -> None:
    said = refused(capsys, here, "serve", "+hw=mi350x", "serving=throughput,cpu")
    assert "only a sweep (-m) runs" in said and "serving=[throughput,cpu]" in said


def test_a_mistake_in_one_job_of_a_sweep_names_that_job_s_value(
        capsys: pytest.CaptureFixture[str], here: Path) -> None:
    assert main(["serve", "-m", "+hw=mi350x", "speculative=none,dspark_fixd", "--dry-run"]) == 2
    said = capsys.readouterr().err
    assert "`speculative=dspark_fixd`: speculative has no option 'dspark_fixd'" in said
    assert list(here.iterdir()) == []


def test_a_hydra_flag_without_its_value(capsys: pytest.CaptureFixture[str], here: Path) -> None:
    assert main(["serve", "+hw=mi350x", "--cfg"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("dspark: argument --cfg/-c: expected one argument; "
                            "`dspark serve --help` lists the flags.\n")


@pytest.mark.parametrize("removed", ["~hw", "~hw=cpu", "hw=null", "+hw="])
def test_removing_the_hardware_profile_is_refused_before_anything_is_planned(
        capsys: pytest.CaptureFixture[str], here: Path, removed: str) -> None:
    """A launch is planned for a profile: removing it was an internal error (exit 70)."""
    for command in ("serve", "smoke", "bench"):
        said = refused(capsys, here, command, removed)
        assert f"{removed} removes the hardware profile" in said
        assert "hint: name one with +hw=<profile>" in said
