"""A dry run is composed by Hydra's app as a run is, and plans under the run directory Hydra
resolves; a command stores only the schema it composes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_dspark


def test_a_dry_run_is_composed_by_hydras_app_as_a_run_is(tmp_path: Path) -> None:
    """One composition path: a dry run resolves what only Hydra's app can (`${hydra:...}`),
    plans under it, and writes nothing."""
    done = run_dspark("bench", "+hw=cpu", "--dry-run", "--json",
                      "hydra.run.dir=out/${hydra:runtime.choices.hw}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run_dir"] == str(tmp_path / "out" / "cpu")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("command", "stored"), [
    ("serve", ["launch_schema.yaml"]), ("verify-checkpoint", ["launch_schema.yaml"]),
    ("env", ["launch_schema.yaml"]), ("smoke", ["smoke_schema.yaml"]),
    ("bench", ["bench_schema.yaml"]), ("validate", ["validate_schema.yaml"]),
])
def test_a_command_stores_only_the_schema_it_composes(command: str, stored: list[str]) -> None:
    code = ("from hydra.core.config_store import ConfigStore\n"
            "from dspark_cli.cli.compose import store_schema\n"
            "from dspark_cli.cli.registry import command_of\n"
            f"store_schema(command_of({command!r}))\n"
            "print(*sorted(k for k in ConfigStore.instance().repo if k.endswith('_schema.yaml')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         check=True, timeout=60).stdout
    assert out.split() == stored


def test_a_run_directory_a_plan_cannot_resolve_is_a_usage_error(tmp_path: Path) -> None:
    done = run_dspark("serve", "+hw=cpu", "--dry-run",
                      "hydra.run.dir=out/${oc.env:DSPARK_TEST_NO_SUCH_VARIABLE}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "hydra.run.dir cannot be resolved in a dry run" in done.stderr
    assert "Traceback" not in done.stderr and list(tmp_path.iterdir()) == []
