"""`dspark bench` end to end against the fake vLLM (a real process speaking real HTTP) with
vLLM's real `vllm bench serve` as the load generator: each validity rule turns a cell invalid,
invalid cells stay out of every speedup, resume, --stop-on-failure, multirun and the report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dspark_cli.server.metrics import PER_REQUEST
from dspark_cli.server.process import free_port
from tests.conftest import dspark_argv, dspark_env, wait_until
from tests.doubles.fake_vllm import SCRIPT
from tests.smoke_support import scratch_of

# Every cell's load generator is vLLM's own `vllm bench serve`.
pytestmark = pytest.mark.vllm

ENV = dspark_env()


def bench_argv(port: int, scenario: str, *overrides: str, model: str = "tiny",
               fake_args: tuple[str, ...] = ()) -> list[str]:
    fake = ",".join([sys.executable, str(SCRIPT), "--port", str(port), "--scenario", scenario,
                     "--model", model, "--k", "3", *fake_args])
    return dspark_argv("bench", "bench=cpu", "+hw=cpu", f"server.port={port}",
                       f"server.command=[{fake}]", "server.ready_timeout_s=20", "bench.warmups=[]",
                       "bench.measured_prompts=6", "bench.phase_timeout_s=120", *overrides)


def run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=ENV)


def bench(tmp_path: Path, scenario: str, *overrides: str, model: str = "tiny",
          flags: tuple[str, ...] = ("--json",), fake_args: tuple[str, ...] = ()
          ) -> tuple[int, dict[str, Any], str]:
    port = free_port()
    done = run([*bench_argv(port, scenario, *overrides, model=model, fake_args=fake_args),
                f"hydra.run.dir={tmp_path / 'run'}", *flags], tmp_path)
    assert done.stdout.strip(), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout), done.stderr


def cell_record(tmp_path: Path, cell_id: str) -> dict[str, Any]:
    return json.loads((tmp_path / "run" / "cells" / cell_id / "cell.json").read_text())


def test_healthy_cells_are_valid_and_give_a_speedup(tmp_path: Path) -> None:
    """Two healthy cells, then a rerun into the same directory: the valid cell is skipped, the
    edited one reruns on a server whose token counter disagrees with the client's (invalid),
    and --stop-on-failure stops there. One load generator's vLLM import for the client-server
    mismatch rule and --stop-on-failure, which had a bench run of their own."""
    code, out, err = bench(tmp_path, "healthy", "bench.concurrency=2",
                           fake_args=("--per-request-spec-decode-metrics", "detailed"))
    assert code == 0, err[-3000:]
    assert [(c["arm"], c["valid"]) for c in out["cells"]] == [("none", True),
                                                              ("draft_model", True)]
    rec = cell_record(tmp_path, "draft_model-c2")
    assert rec["total_output_tokens"] == rec["metrics_delta"]["generation_tokens"] == 6 * 32
    assert rec["completed"] == 6 and rec["failed"] == 0
    assert rec["spec_decode"]["drafts"] > 0 and rec["acceptance_length"] > 1
    assert len(rec["per_position_acceptance"]) == 3
    assert rec["loadgen"]["completed"] == 6 and "ttfts" not in rec["loadgen"]
    assert rec["teardown"]["port_free"] and not rec["teardown"]["leftover_pids"]
    # The engagement probe: 2 requests at once, each answer's steps all K (fixed K); the
    # replaced command reports per-request metrics itself (its own flag), so they are read
    steps = rec["engagement"]
    assert (steps["outcome"], steps["ok"], steps["expected"]) == ("full_k", True, "fixed_k")
    assert (steps["requests"], steps["reported"], steps["short_steps"]) == (2, 2, 0)
    assert steps["level"] == PER_REQUEST
    assert cell_record(tmp_path, "none-c2")["engagement"] is None
    # Every cell ran on its own live scratch directory, removed after it.
    logs = [tmp_path / "run" / "cells" / cell / "server.log" for cell in ("none-c2",
                                                                          "draft_model-c2")]
    scratches = [scratch_of(log) for log in logs]
    assert all("exists=True" in log.read_text() for log in logs), "a cell ran on a deleted TMPDIR"
    assert scratches[0] != scratches[1] and not any(s.exists() for s in scratches)
    by_c = {s["concurrency"]: s for s in out["speedups"]}
    assert (by_c[8]["speedup"], by_c[8]["note"]) == (None, "cell not run")
    speedup = by_c[2]
    base = cell_record(tmp_path, "none-c2")["output_throughput"]
    assert speedup["speedup"] == pytest.approx(rec["output_throughput"] / base)
    for name in ("summary.json", "summary.csv", "summary.png"):
        assert (tmp_path / "run" / name).is_file()
    # --json prints summary.json, plus where the run and its files are.
    assert out["run_dir"] == str(tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {k: v for k, v in out.items() if k not in ("run_dir", "files")} == summary

    # Re-running into the same directory skips finished valid cells; an invalid one reruns
    # and its earlier attempt is kept. The rerun's server counts 35 tokens per request where the
    # client gets 32, so the cell is invalid again, and --stop-on-failure leaves the cells after
    # it (concurrency 8, run second here) unrun.
    path = tmp_path / "run" / "cells" / "none-c2" / "cell.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "valid": False,
                                "reasons": ["edited"]}))
    code, out, err = bench(tmp_path, "counter_mismatch", "bench.concurrencies=[2,8]",
                           flags=("--json", "--stop-on-failure"))
    assert code == 1, err[-3000:]
    assert "draft_model-c2: finished and valid in an earlier run; skipped" in err
    assert "[1/3] none-c2: booting a cold server" in err
    assert (tmp_path / "run" / "cells" / "none-c2.attempt1" / "cell.json").is_file()
    assert not (tmp_path / "run" / "cells" / "draft_model-c2.attempt1").exists()
    assert cell_record(tmp_path, "none-c2")["reasons"] == [
        f"client counted {6 * 32} generated tokens, server {6 * 35} "
        "(vllm:generation_tokens_total delta)"]
    assert "stopping at the first invalid cell" in err
    assert sorted(c["cell_id"] for c in out["cells"]) == ["draft_model-c2", "none-c2"]
    assert not (tmp_path / "run" / "cells" / "none-c8").exists()


def test_each_broken_server_makes_its_own_cell_invalid_and_the_others_still_run(
        tmp_path: Path) -> None:
    """One bench run, each cell's server broken its own way (the fake's --per-boot list, in
    the cells' order: c8 none, draft_model, then c2): a fatal log line, preemptions, requests
    refused. Each cell is invalid for its own reason and none stops the cells after it."""
    boots = tmp_path / "boots.json"
    boots.write_text(json.dumps([["--scenario", "gpu_fault"], ["--scenario", "preemption"],
                                 ["--model", "other"], ["--scenario", "preemption"]]))
    code, out, err = bench(tmp_path, "healthy", fake_args=("--per-boot", str(boots)))
    assert code == 1, err[-3000:]
    assert [(c["cell_id"], c["valid"]) for c in out["cells"]] == [
        ("none-c8", False), ("draft_model-c8", False), ("none-c2", False),
        ("draft_model-c2", False)]
    assert out["mean_speedup"] == {"draft_model": None}

    # The fake prints a GPU memory fault and hangs the request: the cell must not wait out
    # the phase timeout (120 s here).
    rec = cell_record(tmp_path, "none-c8")
    assert any(r.startswith("fatal server log line: rocm_memory_fault: Memory access fault")
               for r in rec["reasons"]), rec["reasons"]
    assert rec["phases"][0]["duration_s"] < 60
    assert rec["teardown"]["port_free"] and not rec["teardown"]["leftover_pids"]

    # Preemptions, in either concurrency's cell
    for cell in ("draft_model-c8", "draft_model-c2"):
        assert cell_record(tmp_path, cell)["reasons"] == [
            "6 preemptions (vllm:num_preemptions_total delta)"], cell

    # The fake serves another model name, so every request is refused (404): nothing is
    # generated on either side, and only the failed-requests rule can catch it; the lossless
    # probe's prompts are refused too, and said so in one line.
    rec = cell_record(tmp_path, "none-c2")
    assert rec["reasons"] == ["6 of 6 requests failed", "0 of 6 requests completed",
                              "lossless probe failed: prompt 0: HTTP 404"]
    assert rec["metrics_delta"]["generation_tokens"] == 0 and rec["fatal_lines"] == []
    assert len((tmp_path / "boots.json.boots").read_text().splitlines()) == 4


def test_multirun_jobs_through_submitit_merge_into_one_report(tmp_path: Path) -> None:
    port = free_port()
    sweep = tmp_path / "sweep"
    done = run([*bench_argv(port, "healthy", "bench.concurrency=2"), "-m",
                "bench.arm=none,draft_model", "hydra/launcher=submitit_local",
                "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    cells = sorted(p.parent.name for p in sweep.rglob("cell.json"))
    assert cells == ["draft_model-c2", "none-c2"]
    assert {p.parts[len(sweep.parts)] for p in sweep.rglob("cell.json")} == {"0", "1"}
    # One job at a time (conf/bench.yaml: hydra.sweeper.max_batch_size=1): no overlap.
    first, second = (json.loads((sweep / n / "cells").glob("*/cell.json").__next__().read_text())
                     for n in ("0", "1"))
    assert first["finished_at"] <= second["started_at"]
    report = run(dspark_argv("bench", "--report", str(sweep), "--json"), tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    out = json.loads(report.stdout)
    assert out["run_dir"] == str(sweep)
    assert out["counts"] == {"cells": 2, "valid": 2, "invalid": 0, "degraded": 0}
    by_c = {s["concurrency"]: s["speedup"] for s in out["speedups"]}
    assert by_c[2] > 0 and by_c[8] is None
    assert (sweep / "summary.png").is_file() and (sweep / "summary.csv").is_file()
    assert not (tmp_path / "runs").exists()  # the report writes only into the sweep


def test_sigterm_mid_phase_tears_the_server_down(tmp_path: Path) -> None:
    import signal

    import psutil

    port = free_port()
    hung = tmp_path / "hung"  # the fake writes it when a request reaches it and hangs
    proc = subprocess.Popen(
        [*bench_argv(port, "hung_request", "bench.arm=none", "bench.concurrency=2",
                     fake_args=("--event-file", str(hung))),
         f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
        env=ENV)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "measured: 6 requests" in line:
            break
    wait_until(hung.exists, 120, "the load generator's first request to hang")
    fake = [p for p in psutil.process_iter(["cmdline"])
            if str(SCRIPT) in " ".join(p.info["cmdline"] or []) and str(port) in
            " ".join(p.info["cmdline"] or [])]
    assert fake, "".join(lines)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    assert "cancelled" in proc.stderr.read()
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in fake)
    left = [p for p in psutil.process_iter(["cmdline"])
            if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert left == []  # the load generator went too
