"""A plain dry run composes, in one composition, the config a run composes, and plans under the
run directory Hydra resolves; a command stores only the schema it composes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import dspark_cli.commands.serve as serve
from dspark_cli.hydra_app import compose_plan
from tests.conftest import REPO, run_dspark


@pytest.mark.parametrize("overrides", [
    ["+hw=mi350x"],
    ["+hw=h200", "hw.nodes=2", "speculative=dspark_fixed"],
    ["+hw=cpu", "hydra/job_logging=disabled", "hydra.run.dir=elsewhere"],  # touches Hydra's
])
def test_a_dry_run_composes_the_config_a_run_composes(overrides: list[str]) -> None:
    plan, _ = compose_plan(serve, "serve", overrides)
    app = run_dspark("serve", *overrides, "--cfg", "job")  # through `@hydra.main`
    assert app.returncode == 0, app.stderr
    assert "hydra" not in plan
    assert OmegaConf.to_yaml(plan) == app.stdout


def test_the_run_directory_is_hydras_resolved_value(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _, planned = compose_plan(serve, "serve", ["+hw=cpu", "hydra.run.dir=out/${now:%Y}/x/.."])
    assert planned == tmp_path / "out" / OmegaConf.create({"y": "${now:%Y}"}).y
    assert list(tmp_path.iterdir()) == []


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


def test_a_run_directory_a_plan_cannot_resolve_is_a_usage_error(tmp_path: Path) -> None:
    done = run_dspark("serve", "+hw=cpu", "--dry-run", "hydra.run.dir=out/${hydra:job.name}",
                      cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "hydra.run.dir cannot be resolved in a dry run" in done.stderr
    assert "Traceback" not in done.stderr and list(tmp_path.iterdir()) == []
