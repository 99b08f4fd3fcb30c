"""`dspark smoke` with no overrides against a real vLLM CPU server.

The embedded default: hardware detected as `cpu`, the tiny model, draft_model with K=3, so the
spec-decode checks run against vLLM's real counters. Its boot is the smoke stage of the
session's validate run (`cpu_validate_run`, tests/vllm_server.py); a command vLLM rejects is a
`dspark smoke` of its own.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest

from dspark_cli.server.metrics import ADAPTIVE, COUNTERS, FIXED, SpecDecode, judge, observed
from dspark_cli.server.process import free_port
from tests.conftest import dspark_argv, dspark_env
from tests.smoke_support import ALL_CHECKS, checks, port_free, statuses
from tests.vllm_server import CpuValidateRun

pytestmark = pytest.mark.vllm


def test_default_smoke_passes_against_real_vllm(cpu_validate_run: CpuValidateRun) -> None:
    """The session's validate run's smoke stage: `dspark smoke`'s own work (`smoke_in`) with no
    overrides but the port, and the record `dspark smoke --json` prints."""
    done, port = cpu_validate_run.done, cpu_validate_run.port
    report = json.loads((cpu_validate_run.run / "smoke" / "smoke.json").read_text())
    assert report["verdict"]["exit_code"] == 0, (report["verdict"], done.stderr[-3000:])

    assert report["mode"] == "managed"
    assert report["profiles"]["hw"] == "cpu" and report["profiles"]["model"] == "tiny"
    assert report["profiles"]["speculative"] == "draft_model"
    assert set(statuses(report)) == ALL_CHECKS
    assert statuses(report)["draft_params"] == "skipped"  # no DSpark on CPU
    assert statuses(report)["engines"] == "skipped"  # one engine
    assert {s for n, s in statuses(report).items()
            if n not in ("draft_params", "engines")} == {"passed"}  # engagement too
    assert "vLLM accepts the command" in checks(report)["vllm_accepts_command"]["evidence"]

    generation = checks(report)["generation"]["data"]
    assert generation == {"requested": 48, "usage": 48, "server_counter_delta": 48}
    spec = checks(report)["spec_decode"]["data"]
    assert spec["k"] == 3 and spec["drafts"] > 0
    assert spec["draft_tokens"] == spec["drafts"] * 3
    assert 0 <= spec["accepted"] <= spec["draft_tokens"]
    # The launch is `dspark serve`'s (nothing added); the steps are read from vLLM's /metrics
    # counters over the request: fixed K proposes K every step
    launch = (Path(report["log"]).parent / "launch.sh").read_text()
    assert "--per-request-spec-decode-metrics" not in launch
    steps = checks(report)["engagement"]["data"]
    assert steps["level"] == COUNTERS and steps["expected"] == "fixed_k"
    assert (steps["reported"], steps["k"], steps["short_steps"]) == (1, 3, None)
    assert steps["steps"] == spec["drafts"] and steps["draft_tokens"] == spec["draft_tokens"]
    assert steps["accepted"] == spec["accepted"]
    # ... so the same counts held to an adaptive expectation show nothing: not credited
    seen = observed([None], [], SpecDecode(spec["drafts"], spec["draft_tokens"],
                                           spec["accepted"], ()), 3)
    assert judge(seen, ADAPTIVE).ok is None and judge(seen, FIXED).ok is True
    assert report["versions"]["server"].startswith("0.32")
    assert report["timings"]["boot_to_health_s"] > 0

    # Teardown left nothing: no new process survives and nothing listens on the port.
    leftovers = [p for p in psutil.process_iter(["pid", "cmdline"])
                 if p.pid not in cpu_validate_run.before
                 and str(port) in " ".join(p.info["cmdline"] or [])]
    assert leftovers == []
    assert port_free(port)


def test_a_command_vllm_rejects_stops_the_smoke(short_dir: Path) -> None:
    """vLLM's own validation runs beside the boot; its rejection is a reported check."""
    port = free_port()
    done = subprocess.run(
        dspark_argv("smoke", f"server.port={port}", "+speculative.extra.no_such_key=1", "--json"),
        cwd=short_dir, env=dspark_env(), capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout)
    assert done.returncode == 3, report["verdict"]
    rejected = checks(report)["vllm_accepts_command"]
    assert rejected["status"] == "failed" and "no_such_key" in rejected["evidence"]
    assert statuses(report)["health"] == "failed"
    assert statuses(report)["teardown"] == "passed"
    assert port_free(port)
