"""`dspark smoke +hw=cpu hw.nodes=2` (deploy=local) against real vLLM: two "nodes" on this host,
each its own process group (node 0 serves the API, node 1 headless with
`--data-parallel-start-rank 1`), one data parallel deployment of DP 2 whose engines both
generate; everything torn down after."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest

from dspark_cli.server.process import free_port
from tests.conftest import LEAN_RANKS, dspark_argv, dspark_env
from tests.smoke_support import ALL_CHECKS, checks, port_free, statuses

pytestmark = pytest.mark.vllm


def test_two_node_smoke_passes_and_both_engines_generate(short_dir: Path) -> None:
    port, rpc = free_port(), free_port()
    before = {p.pid for p in psutil.process_iter()}
    done = subprocess.run(
        dspark_argv("smoke", "+hw=cpu", "hw.nodes=2", *LEAN_RANKS, f"server.port={port}",
                    f"hw.dp_rpc_port={rpc}", "--json"),
        cwd=short_dir, env=dspark_env(), capture_output=True, text=True, timeout=900)
    assert done.stdout.strip(), done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert done.returncode == 0, (report["verdict"], done.stderr[-3000:])
    assert set(statuses(report)) == ALL_CHECKS
    assert {s for n, s in statuses(report).items() if n != "draft_params"} == {"passed"}

    engines = checks(report)["engines"]["data"]
    assert engines["engines"] == 2
    by_engine = report["counters"]["generation_tokens_by_engine"]
    assert set(by_engine) == {"0", "1"} and by_engine["0"] > 0 and by_engine["1"] > 0
    assert sum(by_engine.values()) == report["counters"]["generation_tokens"] == 4 * 48
    assert checks(report)["generation"]["data"] == {
        "requested": 4 * 48, "usage": 4 * 48, "server_counter_delta": 4 * 48}
    # vLLM's own parser judged every node's command, the engine config built for each
    evidence = checks(report)["vllm_accepts_command"]["evidence"]
    assert "node 0: vLLM accepts the command (engine-config)" in evidence, evidence
    assert "node 1: vLLM accepts the command (engine-config)" in evidence, evidence

    run = Path(report["log"]).parent
    nodes_sh = (run / "nodes.sh").read_text()
    assert "--data-parallel-start-rank 1" in nodes_sh and "--headless" in nodes_sh
    log = Path(report["log"]).read_text()
    assert "[node 1] " in log and "EngineCore_DP1" in log and "EngineCore_DP0" in log

    teardown = checks(report)["teardown"]["data"]
    assert teardown["leftover_pids"] == [] and teardown["port_free"]
    assert port_free(port) and port_free(rpc)
    left = [p for p in psutil.process_iter(["pid", "cmdline"])
            if p.pid not in before and f"--data-parallel-rpc-port {rpc}"
            in " ".join(p.info["cmdline"] or [])]
    assert left == [], "a node's process outlived the smoke"
