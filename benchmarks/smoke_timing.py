"""How fast `dspark smoke` is on the CPU default, against references measured in the same run.

    .venv/bin/python benchmarks/smoke_timing.py [--fault-runs 5] [--skip-vllm]

Figures (goals from issue 4):
  1. smoke wall time minus boot-to-health (<= 5 s): `dspark smoke` with no overrides against
     real vLLM CPU; reference: the same server driven by hand (Popen, /health poll, one request,
     one /metrics scrape, SIGTERM to the group), which is the floor for that work.
  2. fatal line to verdict (<= 1 s): the CPU default with `server.command` = the fake vLLM that
     prints a ROCm memory fault into a hung request (its flush time is written to a file);
     reference: the same smoke with every fatal pattern set to null, which can only end at the
     request timeout. Also: a server that dies mid-request (SIGKILL) to its verdict.
  3. teardown (<= 10 s): from the real smoke's report; reference: the hand-driven teardown.
Boots real vLLM twice (~1-2 min on 2 cores). Results to stdout; progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from doubles.fake_vllm import SCRIPT  # noqa: E402

from dspark_cli.server.process import free_port  # noqa: E402

REFERENCE_TIMEOUT_S = 5


def log(message: str) -> None:
    print(f"[smoke_timing] {message}", file=sys.stderr, flush=True)


def dspark_smoke(cwd: Path, *overrides: str) -> tuple[float, int, dict[str, Any]]:
    """Run the real command; (wall seconds, exit code, JSON report)."""
    argv = [sys.executable, "-m", "dspark_cli.cli", "smoke", *overrides, "--json"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - start
    if not done.stdout.strip():
        raise SystemExit(f"dspark smoke gave no report:\n{done.stderr[-3000:]}")
    return wall, done.returncode, json.loads(done.stdout)


def cpu_plan(port: int) -> Any:
    from hydra import compose, initialize_config_dir

    from dspark_cli.config import schema
    from dspark_cli.config import smoke as smoke_schema
    from dspark_cli.launch.plan import build_plan
    from dspark_cli.paths import conf_dir

    schema.register()
    smoke_schema.register()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("smoke", overrides=["+hw=cpu", f"server.port={port}"])
    return build_plan(cfg)


def by_hand(cwd: Path) -> dict[str, float]:
    """The reference: the same planned server driven with no dspark machinery."""
    from dspark_cli.vllm.shim import vllm_command

    port = free_port()
    plan = cpu_plan(port)
    tmp = cwd / "ref-tmp"
    tmp.mkdir()
    env = {**os.environ, **plan.env_map, "TMPDIR": str(tmp)}
    with (cwd / "reference.log").open("w") as out:
        proc = subprocess.Popen(vllm_command(plan.argv), env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    start = time.monotonic()
    try:
        while True:
            try:
                if httpx.get(plan.base_url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise SystemExit(f"reference server exited; see {cwd / 'reference.log'}")
            time.sleep(0.1)
        healthy = time.monotonic()
        httpx.get(plan.base_url + "/metrics", timeout=10)
        httpx.post(plan.base_url + "/v1/completions", timeout=120, json={
            "model": plan.served_model_name, "prompt": "The quick brown fox", "max_tokens": 48,
            "temperature": 0, "ignore_eos": True}).raise_for_status()
        httpx.get(plan.base_url + "/metrics", timeout=10)
        checked = time.monotonic()
    finally:
        group = {p.pid for p in psutil.process_iter() if _pgid(p.pid) == proc.pid}
        stop = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        while any(psutil.pid_exists(p) and _pgid(p) == proc.pid for p in group):
            time.sleep(0.05)
        stopped = time.monotonic()
    return {"boot_to_health_s": healthy - start, "request_and_metrics_s": checked - healthy,
            "teardown_s": stopped - stop}


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def patterns_off() -> list[str]:
    """Overrides that switch every configured fatal pattern off (`null`)."""
    from omegaconf import OmegaConf

    names = OmegaConf.load(REPO / "conf" / "smoke.yaml").smoke.fatal_patterns
    return [f"smoke.fatal_patterns.{name}=null" for name in names]


def fault_run(cwd: Path, scenario: str, *overrides: str) -> dict[str, Any]:
    """A fake-server smoke on the CPU default config; seconds from the fault to the verdict."""
    port = free_port()
    event = cwd / f"event-{port}"
    fake = ",".join([sys.executable, str(SCRIPT), "--port", str(port), "--scenario", scenario,
                     "--k", "3", "--event-file", str(event)])
    wall, code, report = dspark_smoke(cwd, f"server.port={port}", f"server.command=[{fake}]",
                                      *overrides)
    fault_at = float(event.read_text())
    return {"exit_code": code, "fault_to_verdict_s": report["decided_at"] - fault_at,
            "teardown_s": report["timings"]["teardown_s"], "wall_s": wall}


def mark(value: float, goal: float) -> str:
    return f"{value:7.3f} s  (goal <= {goal:g} s: {'met' if value <= goal else 'MISSED'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fault-runs", type=int, default=5)
    parser.add_argument("--skip-vllm", action="store_true", help="only the fake-server figures")
    args = parser.parse_args()
    # Short: vLLM's IPC socket paths live under the run's TMPDIR and may not exceed 107 bytes.
    cwd = Path(tempfile.mkdtemp(prefix="dsb-", dir="/tmp"))
    try:
        lines = []
        if not args.skip_vllm:
            log("real vLLM: dspark smoke (CPU default, no overrides)")
            wall, code, report = dspark_smoke(cwd, f"server.port={free_port()}")
            if code != 0:
                raise SystemExit(f"the default smoke did not pass: {report['verdict']}")
            t = report["timings"]
            log("real vLLM: the same server by hand (reference)")
            ref = by_hand(cwd)
            lines += [
                "1. smoke wall time minus boot-to-health (real vLLM CPU, draft_model K=3)",
                f"   dspark smoke wall {wall:.3f} s, boot-to-health {t['boot_to_health_s']:.3f} s",
                f"   wall - boot-to-health        {mark(wall - t['boot_to_health_s'], 5)}",
                f"     before launch (CLI, preflight, vLLM validation, record): "
                f"{wall - t['total_s']:.3f} s",
                f"     health -> verdict (request, /metrics, checks): "
                f"{t['after_health_to_verdict_s']:.3f} s",
                f"     teardown: {t['teardown_s']:.3f} s",
                f"   reference by hand: request + 2 scrapes {ref['request_and_metrics_s']:.3f} s, "
                f"teardown {ref['teardown_s']:.3f} s, boot {ref['boot_to_health_s']:.3f} s",
                "3. teardown (SIGTERM to the group, confirm nothing left and the port free)",
                f"   dspark smoke teardown        {mark(t['teardown_s'], 10)}",
                f"   reference by hand            {ref['teardown_s']:7.3f} s",
            ]
        log(f"fake vLLM: {args.fault_runs} x gpu_fault, {args.fault_runs} x die_during_request")
        faults = [fault_run(cwd, "gpu_fault") for _ in range(args.fault_runs)]
        deaths = [fault_run(cwd, "die_during_request") for _ in range(args.fault_runs)]
        log(f"fake vLLM: reference without fatal patterns (request timeout "
            f"{REFERENCE_TIMEOUT_S} s)")
        blind = fault_run(cwd, "gpu_fault", *patterns_off(),
                          f"smoke.request_timeout_s={REFERENCE_TIMEOUT_S}")
        assert {f["exit_code"] for f in faults} == {1}, faults
        assert {d["exit_code"] for d in deaths} == {3}, deaths
        fv = [f["fault_to_verdict_s"] for f in faults]
        dv = [d["fault_to_verdict_s"] for d in deaths]
        lines += [
            f"2. fault to verdict (fake vLLM on the CPU default config, {args.fault_runs} runs)",
            f"   fatal log line, median       {mark(statistics.median(fv), 1)}",
            f"   fatal log line, worst        {mark(max(fv), 1)}",
            f"   server death, median         {mark(statistics.median(dv), 1)}",
            f"   server death, worst          {mark(max(dv), 1)}",
            f"   reference without the log watcher: {blind['fault_to_verdict_s']:.3f} s "
            f"(waits for smoke.request_timeout_s={REFERENCE_TIMEOUT_S})",
        ]
        print("\n".join(lines))
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


if __name__ == "__main__":
    main()
