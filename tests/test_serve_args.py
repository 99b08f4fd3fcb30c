"""vLLM moved `vllm serve`'s argument parser: vLLM 0.26 (the H200 image's CUDA build) keeps
`make_arg_parser` and `validate_parsed_serve_args` in `vllm.entrypoints.openai.cli_args`, vLLM
0.32 in `vllm.entrypoints.launchers.cli_args`. On the H200, dspark looked only in the new place,
so the option table fell back to the shipped 0.32 one ("No module named
'vllm.entrypoints.launchers'") and every launch was refused as MissingEngine. Each layout is
written here as the package tree it is (vLLM 0.26 cannot be imported without its CUDA build) and
read in a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PARSER = (
    "import argparse\n"
    "def make_arg_parser(parser):\n"
    "    parser.add_argument('model_tag', nargs='?')\n"
    "    parser.add_argument('--{flag}', type=int)\n"
    "    return parser\n"
    "def validate_parsed_serve_args(args):\n"
    "    pass\n"
)


def fake_vllm(root: Path, module: str, flag: str, body: str = PARSER) -> Path:
    """A `vllm` package holding the serve parser at `module` (dotted) and FlexibleArgumentParser."""
    files = {"vllm/__init__.py": "", "vllm/entrypoints/__init__.py": "",
             "vllm/utils/__init__.py": "",
             "vllm/utils/argparse_utils.py": "from argparse import ArgumentParser as "
                                             "FlexibleArgumentParser\n"}
    parts = module.split(".")
    for i in range(2, len(parts)):
        files.setdefault("/".join(parts[:i]) + "/__init__.py", "")
    files["/".join(parts) + ".py"] = body.format(flag=flag)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def run(root: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(REPO)])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60, cwd=root)


DUMP = "import json; from dspark_cli.vllm.options import dump; print(json.dumps(dump()))"


@pytest.mark.parametrize(("module", "flag"), [
    ("vllm.entrypoints.openai.cli_args", "only-in-026"),
    ("vllm.entrypoints.launchers.cli_args", "only-in-032"),
])
def test_the_option_table_is_read_from_either_layout(tmp_path: Path, module: str,
                                                     flag: str) -> None:
    done = run(fake_vllm(tmp_path, module, flag), DUMP)
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    assert table[flag.replace("-", "_")]["flags"] == [f"--{flag}"]


def test_the_newest_place_wins_when_both_are_there(tmp_path: Path) -> None:
    fake_vllm(tmp_path, "vllm.entrypoints.openai.cli_args", "old")
    fake_vllm(tmp_path, "vllm.entrypoints.launchers.cli_args", "new")
    assert "new" in json.loads(run(tmp_path, DUMP).stdout)


def test_a_dependency_the_parser_lacks_is_the_answer_not_a_fallback(tmp_path: Path) -> None:
    """A missing torch under the new module must not send dspark to the old one."""
    fake_vllm(tmp_path, "vllm.entrypoints.openai.cli_args", "old")
    fake_vllm(tmp_path, "vllm.entrypoints.launchers.cli_args", "new",
              body="import not_installed_dependency\n")
    code = ("from dspark_cli.vllm.options import serve_cli_args\n"
            "try:\n    serve_cli_args()\nexcept ModuleNotFoundError as e:\n    print(e.name)\n")
    assert run(tmp_path, code).stdout.strip() == "not_installed_dependency"


def test_the_parser_check_validates_with_the_026_layout(tmp_path: Path) -> None:
    fake_vllm(tmp_path, "vllm.entrypoints.openai.cli_args", "max-num-seqs")
    (tmp_path / "vllm/engine").mkdir()
    (tmp_path / "vllm/engine/__init__.py").write_text("")
    (tmp_path / "vllm/engine/arg_utils.py").write_text("class AsyncEngineArgs:\n    pass\n")
    code = ("import json; from dspark_cli.vllm.accepts import check\n"
            "print(json.dumps([check(['m', '--max-num-seqs', '4']),"
            " check(['m', '--max-num-seqs', 'x'])]))")
    good, bad = json.loads(run(tmp_path, code).stdout)
    assert good == {"ok": True, "stage": "serve-args",
                    "error": "engine config not checked: no local config.json"}
    assert bad["ok"] is False and bad["stage"] == "parse"
