"""The extras (`dspark[k8s]`, `dspark[plot]`) are imported only where used: without one, the
command that needs it exits 2 naming the extra (no traceback), and the rest of dspark works.

Each run is the real CLI in a real interpreter in which the extra's module cannot be imported:
`sys.modules[name] = None` is Python's own way to make `import name` fail as when it is not
installed (ModuleNotFoundError naming the module)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dspark_cli.bench import records
from tests.conftest import REPO
from tests.test_bench_summary import PROTOCOL, cell

IMAGE = "registry.example/dspark-av@sha256:" + "49067946ae13f404" * 4


def run_without(modules: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    code = ("import sys; sys.modules.update(dict.fromkeys(sys.argv[1].split(','))); "
            "from dspark_cli.cli import main; sys.exit(main(sys.argv[2:]))")
    return subprocess.run([sys.executable, "-c", code, ",".join(modules), *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def test_k8s_without_the_extra_exits_2_naming_it() -> None:
    # Two nodes: a LeaderWorkerSet (the JSON schema) with pod templates (the client's models).
    argv = ["serve", "+hw=mi350x", "hw.nodes=2", "deploy=k8s", f"deploy.k8s.image={IMAGE}",
            "--dry-run"]
    for missing in (["kubernetes"], ["jsonschema"]):
        done = run_without(missing, *argv)
        assert done.returncode == 2, done.stderr
        assert "pip install 'dspark[k8s]'" in done.stderr and missing[0] in done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""
    # The same command with the extra installed prints the manifests.
    done = run_without([], *argv)
    assert done.returncode == 0, done.stderr
    assert "kind: LeaderWorkerSet" in done.stdout


def test_bench_report_without_matplotlib_writes_the_summary_and_says_why_no_png(
        tmp_path: Path) -> None:
    for arm, tps in (("fixed", 100.0), ("adaptive", 150.0), ("none", 80.0)):
        d = tmp_path / "cells" / f"{arm}-c4"
        d.mkdir(parents=True)
        (d / records.CELL_JSON).write_text(json.dumps(cell(arm, 4, tps)))
    done = run_without(["matplotlib"], "bench", "--report", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["files"]["plot_png"] is None
    assert out["protocol"] == PROTOCOL["name"]
    assert (tmp_path / "summary.json").is_file() and not (tmp_path / "summary.png").exists()
    assert "pip install 'dspark[plot]'" in done.stderr
