"""The stall watch (`dspark_cli/server/liveness.py`, `watch.stall_s`): a server whose requests
stop generating while /health stays 200 ends the smoke at once as `stalled`, with the counters
and the log's last lines; `dspark serve` with `watch.serve=true` says so in one line. Against
the fake vLLM (a real HTTP process) whose engine stops producing tokens."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from dspark_cli.server.liveness import EngineSample, StallSettings, StallTracker, StallWatch
from dspark_cli.server.process import free_port
from tests.conftest import dspark_argv, dspark_env, wait_until
from tests.doubles.fake_vllm import command
from tests.smoke_support import checks, run_smoke
from tests.test_bench_rules import bench, cell_record

FAST = ("watch.stall_s=1.5", "watch.poll_s=0.2")


def test_tracker_trips_only_when_busy_and_tokens_stop() -> None:
    tracker = StallTracker(10.0)
    busy = {"0": EngineSample(running=2, generated=100)}
    assert tracker.observe(busy, 0.0) is None
    assert tracker.observe(busy, 9.0) is None
    stall = tracker.observe(busy, 10.5)
    assert stall is not None and stall.engine == "0" and stall.running == 2
    assert stall.reason.startswith("stalled: no token generated for 10.5 s on engine 0")
    # tokens that grow, or an engine with nothing in it, restart the clock
    tracker = StallTracker(10.0)
    tracker.observe(busy, 0.0)
    assert tracker.observe({"0": EngineSample(running=2, generated=101)}, 9.0) is None
    assert tracker.observe({"0": EngineSample(running=2, generated=101)}, 18.0) is None
    idle = StallTracker(10.0)
    for t in (0.0, 50.0, 100.0):
        assert idle.observe({"0": EngineSample(generated=100)}, t) is None
    # waiting requests that never start are a stall too; one engine of two is enough
    both = StallTracker(5.0)
    both.observe({"0": EngineSample(running=1, generated=7), "1": EngineSample(waiting=3)}, 0.0)
    stall = both.observe({"0": EngineSample(running=1, generated=40),
                          "1": EngineSample(waiting=3)}, 6.0)
    assert stall is not None and stall.engine == "1" and stall.waiting == 3


def _post(url: str) -> None:
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "a b",
                                                 "max_tokens": 48}, timeout=30)


def test_watch_trips_on_a_real_server_whose_engine_stops(tmp_path: Path) -> None:
    """One request is answered, the next one stalls: the watch reads the fake's real /metrics
    and trips within a second or two of the threshold, not before."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(command(port, "stalled", "--stall-after", "1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _status(url) == 200, 15, "the fake's /health")
        watch = StallWatch(httpx.Client(), lambda: url,
                           StallSettings(stall_s=1.0, poll_s=0.1)).start()
        _post(url)  # served in full: running stays 0, no stall
        time.sleep(1.5)
        assert watch.tripped is None and watch.reads > 5
        threading.Thread(target=_post, args=(url,), daemon=True).start()
        started = time.monotonic()
        assert watch.fired.wait(10)
        took = time.monotonic() - started
        stall = watch.stop()
        assert stall is not None and 1.0 <= took < 5.0
        assert stall.running == 1 and stall.generated == 48 + 5
        assert httpx.get(url + "/health", timeout=1).status_code == 200  # still "healthy"
    finally:
        proc.kill()
        proc.wait()


def _status(url: str) -> int | None:
    try:
        return httpx.get(url + "/health", timeout=1).status_code
    except httpx.HTTPError:
        return None


def test_smoke_ends_at_once_as_stalled_with_the_evidence(tmp_path: Path) -> None:
    """The request would wait 60 s (smoke.request_timeout_s); the watch ends the smoke within
    seconds, exit 3, the `liveness` check failed with the counters and the log's last lines,
    and the server torn down (run_smoke asserts nothing is left)."""
    started = time.monotonic()
    code, report, _ = run_smoke(tmp_path, "stalled", *FAST, "smoke.request_timeout_s=60")
    took = time.monotonic() - started
    assert code == 3, report
    liveness = checks(report)["liveness"]
    assert liveness["status"] == "failed"
    assert liveness["evidence"].startswith("stalled: no token generated for ")
    data = liveness["data"]
    assert data["reason"] == "stalled" and data["running"] == 1
    assert data["generation_tokens"] == 5 and data["stall_s"] == 1.5
    # the server log's own last lines before the teardown: past the startup line, with the
    # stall watch's /metrics reads as vLLM logs them (on a loaded machine the tail can reach
    # back into the boot, where the watch's first reads are)
    log = Path(report["log"]).read_text().splitlines()
    tail = data["log_tail"]
    at = [i for i in range(len(log)) if log[i:i + len(tail)] == tail]
    started = min(i for i, x in enumerate(log) if "Application startup complete" in x)
    assert tail and at and at[-1] + len(tail) > started + 1
    assert any("GET /metrics" in x for x in log[started:at[-1] + len(tail)])
    assert checks(report)["request"]["status"] == "not_run"
    assert took < 30, f"the smoke took {took:.0f} s: the watch did not end it"


def test_a_healthy_smoke_passes_liveness_and_zero_turns_it_off(tmp_path: Path) -> None:
    code, report, _ = run_smoke(tmp_path, "healthy", *FAST)
    assert code == 0 and checks(report)["liveness"]["status"] == "passed"
    code, report, _ = run_smoke(tmp_path, "healthy", "watch.stall_s=0")
    assert code == 0 and checks(report)["liveness"]["status"] == "skipped"
    assert "watch.stall_s" in checks(report)["liveness"]["evidence"]


def test_serve_watches_in_the_foreground_and_exits_3_when_asked(tmp_path: Path) -> None:
    """`dspark serve watch.serve=true watch.serve_exit=true`: a stalled request prints one
    `dspark: stalled: ...` line, the server is stopped, the exit code is 3."""
    port = free_port()
    fake = ",".join(command(port, "stalled"))
    proc = subprocess.Popen(
        dspark_argv("serve", "+hw=cpu", f"server.port={port}", f"server.command=[{fake}]",
                    "model.synthetic=null", "watch.serve=true", "watch.serve_exit=true", *FAST),
        cwd=tmp_path, env=dspark_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _status(url) == 200, 30, "the served fake's /health")
        threading.Thread(target=_post, args=(url,), daemon=True).start()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    lines = [line for line in err.splitlines() if line.startswith("dspark: stalled: ")]
    assert len(lines) == 1, err
    assert "watch.stall_s=1.5" in lines[0]
    assert _status(url) is None


@pytest.mark.vllm  # the cells' load generator is vLLM's own `vllm bench serve`
def test_a_stalled_bench_cell_ends_at_once_and_the_next_cell_runs(tmp_path: Path) -> None:
    """Two cells (none-c2, then draft_model-c2): the first one's engine stalls mid-phase, the
    second one's serves. The first ends within seconds (not at bench.phase_timeout_s=120) as
    invalid with reason `stalled` and the evidence; the second still runs and is valid."""
    boots = tmp_path / "boots.json"
    boots.write_text(json.dumps([["--scenario", "stalled", "--stall-after", "2"],
                                 ["--scenario", "healthy"]]))
    code, out, err = bench(tmp_path, "healthy", "bench.concurrency=2",
                           "bench.lossless.enabled=false", *FAST,
                           fake_args=("--per-boot", str(boots)))
    assert [(c["cell_id"], c["valid"]) for c in out["cells"]] == [
        ("none-c2", False), ("draft_model-c2", True)], err[-3000:]
    rec = cell_record(tmp_path, "none-c2")
    assert rec["reasons"][0].startswith("stalled: no token generated for "), rec["reasons"]
    assert "(in measured, after " in rec["reasons"][0]
    assert rec["stall"]["reason"] == "stalled" and rec["stall"]["running"] >= 1
    assert rec["stall"]["log_tail"], rec["stall"]
    assert rec["phases"][0]["duration_s"] < 60
    assert rec["teardown"]["port_free"] and not rec["teardown"]["leftover_pids"]
    assert cell_record(tmp_path, "draft_model-c2")["stall"] is None
    assert code == 1


def test_serve_without_exit_says_it_once_and_keeps_serving(tmp_path: Path) -> None:
    """`watch.serve=true` alone: the stall prints its one line (once, while it lasts), the
    server keeps answering, and Ctrl-C still stops it (exit 130)."""
    port = free_port()
    fake = ",".join(command(port, "stalled"))
    proc = subprocess.Popen(
        dspark_argv("serve", "+hw=cpu", f"server.port={port}", f"server.command=[{fake}]",
                    "model.synthetic=null", "watch.serve=true", *FAST),
        cwd=tmp_path, env=dspark_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    url = f"http://127.0.0.1:{port}"
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        wait_until(lambda: _status(url) == 200, 30, "the served fake's /health")
        threading.Thread(target=_post, args=(url,), daemon=True).start()
        wait_until(lambda: any(x.startswith("dspark: stalled: ") for x in lines), 30,
                   "the stall line")
        time.sleep(3.0)  # twice watch.stall_s: the same stall is not said again
        assert proc.poll() is None and _status(url) == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(5)
    assert sum(x.startswith("dspark: stalled: ") for x in lines) == 1, lines


def _stall_watched(port: int) -> tuple[subprocess.Popen[bytes], StallWatch, str]:
    """The fake whose engine stops at its first completion, watched as a session watches it."""
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(command(port, "stalled", "--stall-after", "0"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: _status(url) == 200, 15, "the fake's /health")
    return proc, _watch(url), url


def _watch(url: str) -> StallWatch:
    return StallWatch(httpx.Client(), lambda: url, StallSettings(stall_s=1.0, poll_s=0.1)).start()


def _reason(watch: StallWatch) -> str | None:
    return watch.tripped.reason if watch.tripped is not None else None


def test_the_probes_end_when_the_watch_trips_not_at_their_timeout() -> None:
    """The lossless and the engagement probes against a real server whose engine stalls while
    /health answers 200: each gives up within seconds of the watch (their HTTP timeout is
    120 s), saying why; the server answers /health all along."""
    from dspark_cli.bench.lossless import LosslessSpec, PromptSet, answer
    from dspark_cli.bench.protocol import Sampling
    from dspark_cli.bench.runner import probe

    proc, watch, url = _stall_watched(free_port())
    client = httpx.Client()
    try:
        spec = LosslessSpec(Path("greedy.jsonl"), "0" * 64, 16, "none", 1.0)
        started = time.monotonic()
        got = answer(client, url, "tiny", PromptSet(spec, ("a b", "c d")), 120.0,
                     lambda: _reason(watch))
        assert time.monotonic() - started < 10
        assert got["texts"] == [] and got["token_ids"] is None
        (error,) = got["errors"]
        assert error.startswith("prompt 0: stalled: no token generated for "), error
        watch.stop()  # the engagement probe meets the same stalled server under a fresh watch
        watch = _watch(url)
        started = time.monotonic()
        seen = probe(client, url, "tiny", ("a b",), 4, Sampling(0.0, 1.0, 32, True), 120.0, 3,
                     lambda: None, lambda: _reason(watch))
        assert time.monotonic() - started < 10
        assert (seen.level, seen.requests, seen.steps) == (None, 0, 0)
        assert seen.why.startswith("the probe was given up: stalled: no token generated"), \
            seen.why
        assert _status(url) == 200
    finally:
        watch.stop()
        proc.kill()
        proc.wait()
        client.close()


@pytest.mark.vllm  # the cells' load generator is vLLM's own `vllm bench serve`
def test_a_cell_whose_engine_stalls_in_a_probe_ends_as_stalled(tmp_path: Path) -> None:
    """none-c2's engine stalls at the lossless probe (after the 6 measured requests),
    draft_model-c2's at the engagement probe (after those and the 8 greedy prompts): each cell
    ends at once, invalid with reason `stalled` where it happened and the evidence."""
    boots = tmp_path / "boots.json"
    boots.write_text(json.dumps([["--scenario", "stalled", "--stall-after", "6"],
                                 ["--scenario", "stalled", "--stall-after", "14"]]))
    started = time.monotonic()
    code, out, err = bench(tmp_path, "healthy", "bench.concurrency=2", *FAST,
                           fake_args=("--per-boot", str(boots)))
    assert time.monotonic() - started < 240, "a probe waited for its timeout"
    assert [(c["cell_id"], c["valid"]) for c in out["cells"]] == [
        ("none-c2", False), ("draft_model-c2", False)], err[-3000:]
    for cell, where in (("none-c2", "the lossless probe"),
                        ("draft_model-c2", "the engagement probe")):
        rec = cell_record(tmp_path, cell)
        assert rec["reasons"][0].startswith("stalled: no token generated for "), rec["reasons"]
        assert f"(in {where}, after " in rec["reasons"][0], rec["reasons"]
        assert rec["stall"]["reason"] == "stalled" and rec["stall"]["running"] >= 1
        assert rec["stall"]["log_tail"] and rec["completed"] == 6
        assert rec["teardown"]["port_free"] and not rec["teardown"]["leftover_pids"]
    assert cell_record(tmp_path, "draft_model-c2")["lossless"]["errors"] == []
    assert cell_record(tmp_path, "draft_model-c2")["engagement"]["outcome"] == "not_measured"
    assert code == 1
