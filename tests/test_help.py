"""Help that teaches: every command's `--help` fits a screen, starts from examples, lists its own
flags and, for the commands that compose a config, each option of each group a person picks (from
conf/, never a base or Hydra's own), with the whole config left to `--cfg job`. `-h`, `--help`
and `dspark help CMD` say the same; `-V` prints the version. The CLI is called in-process."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import pytest

from dspark_cli import __version__
from dspark_cli.cli import main
from dspark_cli.cli.registry import COMMANDS, command_of
from tests.conftest import REPO

CONF = REPO / "conf"
MAX_LINES = 60
# The groups each command composes, hw where a launch is planned on this machine.
GROUPS = {
    "serve": ("hw", "model", "speculative", "compilation", "serving", "deploy"),
    "smoke": ("hw", "model", "speculative", "compilation", "serving", "deploy"),
    "bench": ("hw", "model", "speculative", "compilation", "serving", "deploy", "bench"),
    "validate": ("hw", "model", "speculative", "compilation", "serving", "deploy", "bench"),
    "env": ("hw", "model", "speculative", "compilation", "serving", "deploy"),
    "verify-checkpoint": ("model",),
    "report": (),
    "compare": (),
    "prepare": (),
}


def help_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def test_the_table_covers_every_command() -> None:
    assert set(GROUPS) == set(COMMANDS)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_listed_module_holds_that_commands_contract(name: str) -> None:
    assert command_of(name).name == name


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_runs_as_run_cfg_opts(name: str) -> None:
    """One calling convention: `run(cfg, opts)`, cfg None for a command that composes nothing."""
    assert list(inspect.signature(command_of(name).run).parameters) == ["cfg", "opts"]


def test_the_top_help_loads_no_command_and_no_step_of_a_run() -> None:
    """`dspark --help` starts fast: it reads the registry only, neither a command's module (one
    is imported when that command runs), nor the steps before a command runs (cli/pipeline.py),
    nor Hydra and OmegaConf."""
    code = ("import sys\nfrom dspark_cli.cli import main\n"
            "from dspark_cli.cli.registry import COMMANDS\nmain(['--help'])\n"
            "heavy = ('dspark_cli.cli.pipeline', 'hydra', 'omegaconf')\n"
            "print(*[m for m in (*heavy, *(c.module for c in COMMANDS.values()))"
            " if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, check=True, timeout=60)
    assert done.stdout.splitlines()[-1] == ""


@pytest.mark.parametrize("name", list(GROUPS))
def test_help_fits_a_screen_and_teaches(capsys: pytest.CaptureFixture[str], name: str) -> None:
    text = help_of(capsys, name, "--help")
    assert len(text.splitlines()) <= MAX_LINES, text
    assert text.startswith(f"usage: dspark {name}")
    examples = re.findall(rf"^  (dspark {name}\b.*)$", text.split("examples:\n")[1],
                          re.MULTILINE)
    assert 3 <= len(examples) <= 5, text
    for flag in ("-h, --help", "--debug"):
        assert flag in text
    assert f"docs/{name}.md" in text
    assert "bases" not in text and "hydra/" not in text and "== Config ==" not in text


@pytest.mark.parametrize("name", list(GROUPS))
def test_h_help_and_help_cmd_say_the_same(capsys: pytest.CaptureFixture[str], name: str) -> None:
    assert help_of(capsys, name, "-h") == help_of(capsys, name, "--help") == help_of(
        capsys, "help", name)


@pytest.mark.parametrize("name", [n for n in COMMANDS if command_of(n).config is not None])
def test_help_lists_each_option_of_the_groups_picked(capsys: pytest.CaptureFixture[str],
                                                     name: str) -> None:
    text = help_of(capsys, name, "--help")
    assert "--cfg job" in text and "docs/configuration.md" in text
    for group in GROUPS[name]:
        found = re.search(rf"^  \+?{group}=(\w+).*\n((?:    .*\n)*)", text, re.MULTILINE)
        assert found, (group, text)
        # one option: on the group's line; several: a line each (aliases share one)
        named = ([found.group(1)] if found.group(1) != "NAME" else
                 [n for line in found.group(2).splitlines() for n in line.split()[0].split("|")])
        assert sorted(named) == sorted(p.stem for p in (CONF / group).glob("*.yaml")), group
    assert name == "verify-checkpoint" or "+hw=NAME" in text


def test_a_profile_line_says_what_hardware_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys, "serve", "--help")
    assert re.search(r"^    mi350x  8 x AMD Instinct MI350X", text, re.MULTILINE)
    assert re.search(r"^    h200 +8 x NVIDIA H200", text, re.MULTILINE)
    assert re.search(r"^    cpu +No GPU", text, re.MULTILINE)


def test_the_seeds_job_is_the_first_example(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys, "serve", "--help")
    first = text.split("examples:\n")[1].splitlines()[0]
    assert first.split("#")[0].strip() == "dspark serve +hw=mi350x --dry-run"


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    assert help_of(capsys, flag) == f"dspark {__version__}\n"


def test_help_of_an_unknown_command_is_a_usage_error_with_did_you_mean(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["help", "serv"]) == 2
    assert "Did you mean `dspark serve`?" in capsys.readouterr().err


def test_help_alone_is_the_top_help(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys, "help")
    assert "dspark help <command>" in text and all(f"  {n}" in text for n in COMMANDS)


def test_cfg_job_still_prints_the_whole_config(capsys: pytest.CaptureFixture[str]) -> None:
    """What the help no longer dumps, `--cfg job` does."""
    assert main(["serve", "+hw=mi350x", "--cfg", "job"]) == 0
    out = capsys.readouterr().out
    assert "max_num_seqs: 256" in out and "runtime:" in out
