"""`dspark smoke server.url=...`: attach to a running server (no boot, no teardown), with the
log checks of a GPU profile run against the fake's log file."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dspark_cli.server.metrics import PER_REQUEST
from dspark_cli.server.process import free_port
from tests.conftest import dspark_argv, dspark_env, wait_until
from tests.doubles.fake_vllm import command
from tests.smoke_support import checks, statuses

DSPARK_LINES = ("DSpark draft model loaded: 97 params",
                "DSA indexer decode path: use_flattening=True supports_varlen=True",
                "Breakable CUDA graph enabled")


class Attached:
    """A fake vLLM started by the test (as an operator would), its output in a log file."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.port = free_port()
        self.log = tmp_path / "server.log"
        self.url = f"http://127.0.0.1:{self.port}"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(command(self.port, "healthy", *args), stdout=out,
                                         stderr=subprocess.STDOUT)
        wait_until(lambda: "Application startup complete" in self.log.read_text(), 10,
                   "the fake server to start")

    def smoke(self, tmp_path: Path, *overrides: str) -> tuple[int, dict[str, Any]]:
        argv = dspark_argv("smoke", f"server.url={self.url}", "server.ready_timeout_s=5",
                           *overrides, "--json")
        done = subprocess.run(argv, cwd=tmp_path, env=dspark_env(), capture_output=True,
                              text=True, timeout=60)
        assert done.stdout.strip(), done.stderr
        return done.returncode, json.loads(done.stdout)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def attach(tmp_path: Path) -> Iterator[Any]:
    started: list[Attached] = []

    def start(*args: str) -> Attached:
        started.append(Attached(tmp_path, *args))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def test_rocm_dspark_profile_passes_against_a_server_that_prints_its_lines(
        tmp_path: Path, attach: Any) -> None:
    lines = [a for line in DSPARK_LINES for a in ("--print-line", line)]
    server = attach("--model", "dsv4flash", "--k", "7", "--adaptive",
                    "--per-request-spec-decode-metrics", "detailed", *lines)
    code, report = server.smoke(tmp_path, "+hw=mi350x", f"server.log={server.log}")
    assert code == 0, report["verdict"]
    # Adaptive verification seen to engage: vLLM's per-request metrics show trimmed steps.
    engaged = checks(report)["engagement"]
    assert engaged["status"] == "passed", engaged
    assert engaged["data"]["expected"] == "adaptive" and engaged["data"]["k"] == 7
    assert 0 < engaged["data"]["short_steps"] < engaged["data"]["steps"]
    assert engaged["data"]["level"] == PER_REQUEST  # the server reports them: its own flags
    assert "trimmed" in engaged["evidence"]
    assert report["mode"] == "attached"
    found = checks(report)["startup_lines"]["data"]
    assert set(found) >= {"DSpark draft model loaded", "use_flattening=True",
                          "Breakable CUDA graph enabled", "Application startup complete"}
    assert checks(report)["draft_params"]["data"]["params"] == 97
    # The evidence lines the report cites: both expected on this profile, each with its line.
    evidence = checks(report)["log_evidence"]["data"]["evidence"]
    for family, printed in (("use_flattening", DSPARK_LINES[1]),
                            ("breakable_cudagraph", DSPARK_LINES[2])):
        assert evidence[family]["expected"] is True
        assert evidence[family]["line"].endswith(printed) and evidence[family]["line_no"] > 0
    assert report["counters"]["spec_decode"]["draft_tokens"] == (
        report["counters"]["spec_decode"]["drafts"] * 7)
    assert statuses(report)["teardown"] == "skipped"
    assert server.proc.poll() is None  # attached: not ours to stop
    assert httpx.get(server.url + "/health").status_code == 200


def test_missing_rocm_lines_and_a_short_draft_fail(tmp_path: Path, attach: Any) -> None:
    server = attach("--model", "dsv4flash", "--k", "7",
                    "--print-line", "DSpark draft model loaded: 96 params")
    code, report = server.smoke(tmp_path, "+hw=mi350x", f"server.log={server.log}")
    assert code == 1
    assert statuses(report)["startup_lines"] == "failed"
    assert "use_flattening=True" in checks(report)["startup_lines"]["evidence"]
    assert statuses(report)["draft_params"] == "failed"
    assert "confidence head" in checks(report)["draft_params"]["evidence"]


@pytest.mark.parametrize(("args", "status", "words"), [
    (("--per-request-spec-decode-metrics", "detailed"), "skipped",
     "not shown: adaptive verification is configured, but no step was trimmed"),
    (("--adaptive", "--per-request-spec-decode-metrics", "summary"), "passed",
     "draft slots left out"),
    ((), "skipped", "requests; /metrics spec-decode counters)"),
])
def test_adaptive_engagement_is_held_to_the_answers(
        tmp_path: Path, attach: Any, args: tuple[str, ...], status: str, words: str) -> None:
    """Fixed-K steps under the adaptive profile are "not shown" (skipped, never passed: vLLM 0.32
    counts scheduled drafts, so they cannot tell a working adaptive launch from a fallback); the
    summary level shows trimming by its totals; a server that reports none per request is read
    from its /metrics counters, which count every scheduled draft as K slots."""
    lines = [a for line in DSPARK_LINES for a in ("--print-line", line)]
    server = attach("--model", "dsv4flash", "--k", "7", *args, *lines)
    code, report = server.smoke(tmp_path, "+hw=mi350x", f"server.log={server.log}")
    assert checks(report)["engagement"]["status"] == status
    assert words in checks(report)["engagement"]["evidence"]
    assert code == 0, report["verdict"]


def test_attached_without_a_log_skips_the_log_checks(tmp_path: Path, attach: Any) -> None:
    server = attach("--k", "3")
    code, report = server.smoke(tmp_path, "+hw=cpu")
    assert code == 0, report["verdict"]
    for name in ("startup_lines", "no_fatal_lines", "draft_params"):
        assert statuses(report)[name] == "skipped"
    assert statuses(report)["server_alive"] == "passed"


def test_a_missing_log_file_is_a_usage_error(tmp_path: Path, attach: Any) -> None:
    server = attach()
    argv = dspark_argv("smoke", f"server.url={server.url}", f"server.log={tmp_path / 'nope.log'}")
    done = subprocess.run(argv, cwd=tmp_path, env=dspark_env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "is not a file" in done.stderr and "Traceback" not in done.stderr


def test_nothing_listening_is_a_server_failure(tmp_path: Path) -> None:
    argv = dspark_argv("smoke", f"server.url=http://127.0.0.1:{free_port()}",
                       "server.ready_timeout_s=1", "--json")
    done = subprocess.run(argv, cwd=tmp_path, env=dspark_env(), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3
    assert statuses(json.loads(done.stdout))["health"] == "failed"
