"""A plain dry run composes the same config as Hydra's app, without loading Hydra's help or
run-time configs; a command stores only the schema it composes; the compose cache's key follows
every config and Python file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra._internal.config_repository import ConfigRepository
from omegaconf import OmegaConf

import dspark_cli.commands.serve as serve
from dspark_cli.config import cache
from dspark_cli.hydra_app import compose_once
from tests.conftest import REPO, compose_config


@pytest.mark.parametrize("overrides", [
    ["+hw=mi350x"],
    ["+hw=h200", "hw.nodes=2", "speculative=dspark_fixed"],
    ["+hw=cpu", "hydra/job_logging=disabled", "hydra.run.dir=elsewhere"],  # touches Hydra's
])
def test_plan_settings_change_nothing_in_the_config(overrides: list[str]) -> None:
    plan = compose_once(serve, "serve", overrides)
    app = compose_config(overrides)
    assert OmegaConf.to_yaml(plan) == OmegaConf.to_yaml(app)
    assert OmegaConf.get_type(plan) is OmegaConf.get_type(app)


def test_a_plan_loads_none_of_hydras_help_or_runtime_configs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list[str] = []
    load = ConfigRepository.load_config

    def recording(self: ConfigRepository, config_path: str):  # type: ignore[no-untyped-def]
        result = load(self, config_path)
        if result is not None:
            loaded.append(config_path)
        return result

    monkeypatch.setattr(ConfigRepository, "load_config", recording)
    compose_once(serve, "serve", ["+hw=mi350x"])
    hydra_groups = {p for p in loaded if p.startswith("hydra/") and p != "hydra/config"}
    assert "hw/mi350x" in loaded
    assert hydra_groups == set(), hydra_groups


def test_the_key_follows_config_and_python_files(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "conf"
    (conf / "hw" / "__pycache__").mkdir(parents=True)
    (conf / "serve.yaml").write_text("a: 1\n")
    (conf / "hw" / "x.yaml").write_text("b: 2\n")
    monkeypatch.setattr(cache, "conf_dir", lambda: conf)
    first = cache.key_text("serve", [])
    assert str(conf / "hw" / "x.yaml") in first
    assert str(Path(cache.__file__).resolve()) in first  # dspark's own modules (the schemas)

    (conf / "hw" / "__pycache__" / "x.yaml").write_text("ignored\n")
    (conf / "notes.txt").write_text("not a config\n")
    assert cache.key_text("serve", []) == first

    (conf / "hw" / "x.yaml").write_text("b: 22\n")  # another size
    second = cache.key_text("serve", [])
    assert second != first
    os.utime(conf / "hw" / "x.yaml", ns=(1, 1))  # same size, another mtime
    assert cache.key_text("serve", []) not in (first, second)


@pytest.mark.parametrize(("command", "stored"), [
    ("serve", ["launch_schema.yaml"]), ("verify_checkpoint", ["launch_schema.yaml"]),
    ("smoke", ["smoke_schema.yaml"]), ("bench", ["bench_schema.yaml"]),
    ("validate", ["validate_schema.yaml"]),
])
def test_a_command_stores_only_the_schema_it_composes(command: str, stored: list[str]) -> None:
    code = ("import importlib\n"
            "from hydra.core.config_store import ConfigStore\n"
            "from dspark_cli.hydra_app import register_schemas\n"
            f"register_schemas(importlib.import_module('dspark_cli.commands.{command}'))\n"
            "print(*sorted(k for k in ConfigStore.instance().repo if k.endswith('_schema.yaml')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         check=True, timeout=60).stdout
    assert out.split() == stored
