"""`serve`, `smoke` and `bench` in an install where vLLM or torch cannot be imported (`pip
install dspark` without the `cpu` extra) say what to install and exit 4, never 70 with a
traceback; a dry run, which imports neither, still works. Two real broken installs: a
PYTHONPATH folder whose `torch` and `vllm` packages raise ModuleNotFoundError on import, and a
sitecustomize that hides both from the import system, as if they were not installed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dspark_cli.errors import ExitCode
from dspark_cli.server.process import free_port
from tests.conftest import REPO, run_dspark_process

STUB = 'raise ModuleNotFoundError("No module named {0!r}", name="{0}")\n'
HIDER = '''import sys
class _Hide:
    """Finds nothing for vllm and torch: they are not installed."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("vllm", "torch"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Hide())
'''


def broken_install(tmp_path: Path, kind: str) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    if kind == "stubs":
        for module in ("torch", "vllm"):
            (site / module).mkdir()
            (site / module / "__init__.py").write_text(STUB.format(module))
    else:
        (site / "sitecustomize.py").write_text(HIDER)
    path = os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])
    # A fresh cache: the tiny model is not made yet, as on a new machine.
    return {"PYTHONPATH": path.rstrip(os.pathsep), "DSPARK_CACHE_DIR": str(tmp_path / "cache")}


@pytest.mark.parametrize("kind", ["stubs", "hidden"])
@pytest.mark.parametrize("args", [
    ["serve", "+hw=cpu"],
    ["smoke", "+hw=cpu", "server.ready_timeout_s=20"],
    ["bench", "+hw=cpu"],
    # two nodes: every node's command is asked about (test_smoke_nodes has vLLM answer)
    ["serve", "+hw=cpu", "hw.nodes=2", "--dry-run", "--validate"],
], ids=["serve", "smoke", "bench", "serve-validate"])
def test_no_engine_says_what_to_install(tmp_path: Path, kind: str, args: list[str]) -> None:
    port = free_port()  # not 8000: a server of someone else's may hold it
    done = run_dspark_process(*args, f"server.port={port}", env=broken_install(tmp_path, kind),
                              cwd=tmp_path, timeout=180)
    assert done.returncode == ExitCode.MISSING_ENGINE == 4, done.stderr
    assert "pip install 'dspark[cpu]'" in done.stderr
    assert "cannot import" in done.stderr
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr


def test_a_dry_run_needs_no_engine(tmp_path: Path) -> None:
    done = run_dspark_process("serve", "+hw=cpu", "--dry-run",
                              env=broken_install(tmp_path, "hidden"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "vllm serve" in done.stdout or "dspark_cli.vllm.shim" in done.stdout
