"""The checkpoint decides the model family: `model=local` on a DeepSeek-V4 checkpoint dropped the
family's flags and rules (exit 0) before; now it is refused naming the option to use, and a
hostile config.json gets a one-paragraph error, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from checkpoint_factory import build_checkpoint

from dspark_cli.errors import UsageError
from dspark_cli.launch.checks import MAX_CONFIG_BYTES, check_family, read_declared
from tests.conftest import compose_typed, run_dspark


@pytest.fixture(scope="module")
def dsv4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("family") / "dsv4")


def test_model_local_on_a_deepseek_v4_checkpoint_is_refused(dsv4: Path) -> None:
    done = run_dspark("serve", "+hw=mi350x", "model=local", f"model.path={dsv4}", "--dry-run")
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert "DeepseekV4ForCausalLM" in done.stderr and "model=deepseek_v4_local" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_family_option_gets_the_familys_flags_and_rules(dsv4: Path) -> None:
    done = run_dspark("serve", "+hw=mi350x", "model=deepseek_v4_local", f"model.path={dsv4}",
                      "--dry-run")
    assert done.returncode == 0, done.stderr
    for flag in ("--kv-cache-dtype fp8", "--trust-remote-code", "--tokenizer-mode deepseek_v4",
                 "--reasoning-parser deepseek_v4"):
        assert flag in done.stdout
    auto = run_dspark("serve", "+hw=mi350x", "model=deepseek_v4_local", f"model.path={dsv4}",
                      "model.args.kv_cache_dtype=auto", "--dry-run")
    assert auto.returncode == 1 and "sparse-mla-fp8-kv FAILED" in auto.stderr


def _model(path: Path, option: str = "local") -> object:
    return compose_typed(["+hw=mi350x", f"model={option}", f"model.path={path}"]).model


def _with_config(tmp_path: Path, content: bytes | str) -> Path:
    root = tmp_path / "ckpt"
    root.mkdir()
    data = content.encode() if isinstance(content, str) else content
    (root / "config.json").write_bytes(data)
    return root


def test_a_family_option_on_another_architecture_is_refused(tmp_path: Path) -> None:
    root = _with_config(tmp_path, json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(UsageError, match="use model=local"):
        check_family(_model(root, "deepseek_v4_local"))
    check_family(_model(root, "local"))


def test_model_type_alone_decides_too(tmp_path: Path) -> None:
    root = _with_config(tmp_path, json.dumps({"model_type": "deepseek_v4"}))
    with pytest.raises(UsageError, match="deepseek_v4_local"):
        check_family(_model(root))


@pytest.mark.parametrize(("content", "message"), [
    ('{"architectures": 5}', "must be a list of names, not int"),
    ('{"architectures": ["DeepseekV4ForCausalLM", 1]}', "must be a list of names"),
    ('{"architectures": "DeepseekV4ForCausalLM"}', "must be a list of names, not str"),
    ('{"model_type": ["deepseek_v4"]}', "`model_type` must be a name"),
    ("not json at all", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    (b"\xff\xfe{}", "not UTF-8"),
    ("[" * 100000 + "]" * 100000, "nested too deeply|must be a JSON object"),
])
def test_a_hostile_config_json_is_a_clear_usage_error(tmp_path: Path, content: str,
                                                      message: str) -> None:
    root = _with_config(tmp_path, content)
    with pytest.raises(UsageError, match=message):
        check_family(_model(root))


def test_a_huge_config_json_is_refused_without_reading_it(tmp_path: Path) -> None:
    root = _with_config(tmp_path, "{}")
    os.truncate(root / "config.json", 50 * MAX_CONFIG_BYTES)  # sparse: no disk used
    with pytest.raises(UsageError, match="more than any model config"):
        check_family(_model(root))


def test_config_json_links(tmp_path: Path, dsv4: Path) -> None:
    root = tmp_path / "links"
    root.mkdir()
    (root / "config.json").symlink_to("/dev/zero")
    with pytest.raises(UsageError, match="not a regular file"):
        read_declared(root)
    (root / "config.json").unlink()
    (root / "config.json").symlink_to(root / "config.json")  # a loop
    with pytest.raises(UsageError, match="cannot be read"):
        read_declared(root)
    (root / "config.json").unlink()
    (root / "config.json").mkdir()
    with pytest.raises(UsageError, match="not a regular file"):
        read_declared(root)
    (root / "config.json").rmdir()
    assert read_declared(root) is None  # missing: the structural check reports it
    (root / "config.json").symlink_to(dsv4 / "config.json")  # outside, as in the HF cache
    assert read_declared(root).family == "deepseek_v4"


def test_a_hostile_config_json_on_the_command_line(tmp_path: Path) -> None:
    root = _with_config(tmp_path, '{"architectures": {"a": 1}}')
    done = run_dspark("serve", "+hw=mi350x", "model=local", f"model.path={root}", "--dry-run")
    assert done.returncode == 2 and "must be a list of names" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
