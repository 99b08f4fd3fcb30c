"""Overrides as people type them: `~` in a path value expanded as the shell would; a value
Hydra's grammar cannot read is one line, exit 2, that shows the override quoted, and the quoted
form pasted into a real shell gives exactly the value the user meant."""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from dspark_cli.cli.overrides import expand_home, hydra_value, shell_word
from tests.conftest import REPO, dspark_argv, dspark_env, run_dspark

HOME = "/home/ann"


def fake_expanduser(path: str) -> str:
    return (HOME + path[1:] if path == "~" or path.startswith("~/")
            else "/home/bob" + path[4:] if path.startswith("~bob") else path)


@pytest.mark.parametrize(("override", "expanded"), [
    ("model.path=~/models/x", "model.path=/home/ann/models/x"),
    ("model.path=~", "model.path=/home/ann"),
    ("bench.dataset.path='~/d s/x.jsonl'", "bench.dataset.path='/home/ann/d s/x.jsonl'"),
    ('server.log="~/v.log"', 'server.log="/home/ann/v.log"'),
    ("hydra.run.dir=~bob/runs", "hydra.run.dir=/home/bob/runs"),
    ("+model.tokenizer=~nobody/x", "+model.tokenizer=~nobody/x"),  # no such home: Hydra says
    ("model.path=/abs/~x", "model.path=/abs/~x"),
    ("~hw", "~hw"),
    ("serving.args.max_num_seqs=8", "serving.args.max_num_seqs=8"),
])
def test_home_is_expanded_in_values(override: str, expanded: str) -> None:
    assert expand_home([override], fake_expanduser) == [expanded]


def test_an_expanded_home_that_hydra_cannot_read_bare_is_quoted() -> None:
    [out] = expand_home(["model.path=~/my models/x"], lambda p: "/home/a b" + p[1:])
    assert out == "model.path='/home/a b/my models/x'"


def composed(*args: str) -> dict:
    done = run_dspark("serve", "+hw=cpu", *args, "--cfg", "job")
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_the_cli_expands_home_in_a_path_key_for_a_run_and_a_dry_run(tmp_path: Path) -> None:
    home = os.environ["HOME"]
    assert composed("model.path=~/models/x")["model"]["path"] == f"{home}/models/x"
    done = run_dspark("serve", "+hw=cpu", "model=local", "model.path=~/no-such-ckpt",
                      "--dry-run")
    assert "LexerNoViableAlt" not in done.stderr
    assert f"{home}/no-such-ckpt" in done.stdout + done.stderr


LEXER_ERRORS = {
    "+serving.extra_args.note=it's": "it's",
    "model.args.served_model_name=modèle": "modèle",
    '+hw.env.JSON_ARG={"a":1}': '{"a":1}',
    "+serving.extra_args.note=f(x); y#z": "f(x); y#z",
    "+serving.extra_args.note=x=$HOME`id`\\": "x=$HOME`id`\\",
}


@functools.cache
def refused(override: str, dry_run: bool) -> subprocess.CompletedProcess[str]:
    """`dspark serve +hw=cpu <override>`, run once per session: both tests below read it."""
    return run_dspark("serve", "+hw=cpu", override, *(["--dry-run"] if dry_run else []))


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("override", LEXER_ERRORS)
def test_a_lexer_error_is_one_line_that_shows_the_quoting(override: str, dry_run: bool) -> None:
    done = refused(override, dry_run)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dspark: cannot read the override"), lines
    for noise in ("HYDRA_FULL_ERROR", "Traceback", "LexerNoViableAlt", "hydra.cc"):
        assert noise not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(("override", "value"), LEXER_ERRORS.items())
def test_the_suggested_quoting_pasted_into_bash_gives_the_value(override: str,
                                                                value: str) -> None:
    suggestion = refused(override, True).stderr.strip().rsplit("write it as ", 1)[1]
    shell = subprocess.run(
        ["bash", "-c", f"{shlex.join(dspark_argv('serve', '+hw=cpu'))} {suggestion} --cfg job"],
        capture_output=True, text=True, cwd=REPO, timeout=120, env=dspark_env())
    assert shell.returncode == 0, shell.stderr
    cfg = yaml.safe_load(shell.stdout)
    key = override.split("=", 1)[0].lstrip("+").split(".")
    node = cfg
    for part in key:
        node = node[part]
    assert node == value


@pytest.mark.parametrize("text", ["it's", 'say "hi"', "both ' and \"", "modèle", "{a: 1}",
                                  "ends with \\", "a\\'b", "c:\\dir\\"])
def test_hydra_value_and_shell_word_round_trip(text: str) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    [parsed] = OverridesParser.create().parse_overrides([f"k={hydra_value(text)}"])
    assert parsed.value() == text
    echoed = subprocess.run(["bash", "-c", f"printf %s {shell_word(text)}"],
                            capture_output=True, text=True, check=True).stdout
    assert echoed == text


@pytest.mark.parametrize("args", [["modèle", "--dry-run"], ["foo"]])
def test_a_word_without_equals_is_one_line_too(args: list[str]) -> None:
    done = run_dspark("serve", "+hw=cpu", *args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"dspark: cannot read the override {args[0]!r}: Hydra's overrides are key=value, "
        "+key=value or ~key."]


def test_a_flag_value_is_not_taken_for_an_override() -> None:
    done = run_dspark("serve", "+hw=cpu", "--cfg", "job")
    assert done.returncode == 0, done.stderr
    assert "served_model_name" in done.stdout


@pytest.mark.parametrize(("override", "suggested"), [("+hw.env.1A=x", "+hw.env._1A=...")])
def test_a_key_hydra_cannot_read_is_not_told_to_quote_its_value(override: str,
                                                                suggested: str) -> None:
    """The hint names the part of the key that is no identifier and a key that is read,
    never the same override again."""
    done = run_dspark("serve", "+hw=cpu", override, "--dry-run")
    assert done.returncode == 2, done.stderr
    assert "quoting cannot fix a key" in done.stderr and suggested in done.stderr
    assert f"write it as {override}" not in done.stderr
    key = suggested.removesuffix("=...")
    again = run_dspark("serve", "+hw=cpu", f"{key}=x", "--dry-run")
    assert "cannot read the override" not in again.stderr, again.stderr
