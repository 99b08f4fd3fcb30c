"""Issue 49 (points 1, 3, 4, 5 and the config/CLI items of 6) and issue 46.6's secrets and server
parts: never delete a directory the run did not make, never print a secret read through
`${oc.env:...}`, never hang on a server, never write through a planted `.hydra` link, and a
sentence (exit 2) for every odd input below.

The servers are real: `http.server` on 127.0.0.1 (an ephemeral port) in a thread of the test,
answering as a broken or hostile server would."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dspark_cli.errors import ServerError
from dspark_cli.server import session as probe
from dspark_cli.server.deployment import AttachedServer, Watch
from dspark_cli.server.metrics import ScrapeError, scrape
from dspark_cli.server.session import ServerSession
from tests.conftest import dspark_argv, dspark_env, run_dspark, run_dspark_process

DRIP_S = 0.5  # the hostile server's pause between two bytes

# -- a real server that misbehaves -----------------------------------------------------------
Route = Callable[[http.server.BaseHTTPRequestHandler, threading.Event], None]


def drip(handler: http.server.BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """Headers, then one byte every DRIP_S, until the test ends."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain")
    handler.end_headers()
    while not stop.wait(DRIP_S):
        handler.wfile.write(b"#")
        handler.wfile.flush()


def drip_headers(handler: http.server.BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """A status line, then its headers one byte every DRIP_S, never ending them."""
    handler.wfile.write(b"HTTP/1.0 200 OK\r\n")
    handler.wfile.flush()
    while not stop.wait(DRIP_S):
        handler.wfile.write(b"X")
        handler.wfile.flush()


def endless_metrics(handler: http.server.BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """A /metrics that never ends, as fast as the socket takes it."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain")
    handler.end_headers()
    line = b"# HELP vllm:x an endless page\n" * 1024
    while not stop.is_set():
        handler.wfile.write(line)


def answer(status: int, body: bytes, **headers: str) -> Route:
    def route(handler: http.server.BaseHTTPRequestHandler, stop: threading.Event) -> None:
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    return route


class Hostile:
    """A threaded HTTP server on 127.0.0.1 whose paths answer as `routes` say (404 else)."""

    def __init__(self, routes: dict[str, Route]) -> None:
        self.stop = threading.Event()
        stop = self.stop

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self) -> None:
                route = routes.get(self.path, answer(404, b"not found"))
                with contextlib.suppress(OSError):  # the client gave up, as it should
                    route(self, stop)

            do_POST = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hostile() -> Iterator[Callable[[dict[str, Route]], Hostile]]:
    started: list[Hostile] = []

    def start(routes: dict[str, Route]) -> Hostile:
        started.append(Hostile(routes))
        return started[-1]

    yield start
    for server in started:
        server.close()


def bounded(call: Callable[[], object], limit_s: float) -> tuple[object, float]:
    """`call()`'s result (or the exception it raised) and how long it took; the test fails
    (rather than hangs) when it has not returned within `limit_s`."""
    box: list[object] = []

    def run() -> None:
        try:
            box.append(call())
        except Exception as e:
            box.append(e)

    started = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit_s)
    assert box, f"still waiting after {limit_s} s: no total deadline"
    return box[0], time.monotonic() - started


# -- point 4: every exchange bounded ---------------------------------------------------------
def test_a_health_that_drips_after_its_headers_is_no_answer_within_the_deadline(
        hostile: Any) -> None:
    server = hostile({"/health": drip})
    with httpx.Client() as client:
        status, took = bounded(lambda: probe.health(client, server.url), 15)
    assert status is None  # a connection was made, no answer came in time
    assert took < probe.PROBE_TIMEOUT_S + 1


def test_a_health_that_drips_its_headers_is_no_answer_within_the_deadline(
        hostile: Any) -> None:
    server = hostile({"/health": drip_headers})
    with httpx.Client() as client:
        status, took = bounded(lambda: probe.health(client, server.url), 15)
    assert status is None and took < probe.PROBE_TIMEOUT_S + 1


def test_a_version_that_drips_is_not_said(hostile: Any) -> None:
    server = hostile({"/version": drip})
    with httpx.Client() as client:
        said, took = bounded(lambda: probe.version(client, server.url), 15)
    assert said is None and took < probe.PROBE_TIMEOUT_S + 1


def test_an_endless_metrics_is_cut_at_the_size_cap(hostile: Any) -> None:
    from dspark_cli.server.http import LARGE_BODY

    server = hostile({"/metrics": endless_metrics})
    with httpx.Client() as client:
        error, took = bounded(lambda: scrape(client, server.url, timeout_s=30), 60)
    assert isinstance(error, ScrapeError), error
    assert f"more than {LARGE_BODY} bytes" in str(error)
    assert took < 30


def test_a_dripping_metrics_is_a_scrape_error_within_its_deadline(hostile: Any) -> None:
    server = hostile({"/metrics": drip})
    with httpx.Client() as client:
        error, took = bounded(lambda: scrape(client, server.url, timeout_s=2), 15)
    assert isinstance(error, ScrapeError) and "within 2 s" in str(error), error
    assert took < 3


def test_a_declared_body_over_the_cap_is_not_read(hostile: Any) -> None:
    from dspark_cli.server.http import SMALL_BODY, exchange

    server = hostile({"/health": answer(200, b"x" * (SMALL_BODY + 1))})
    with httpx.Client() as client, pytest.raises(httpx.HTTPError, match="more than"):
        exchange(client, "GET", server.url + "/health", deadline_s=2, max_bytes=SMALL_BODY)


@pytest.mark.parametrize("body", [
    b"vllm:generation_tokens_total NaN\n",
    b"vllm:generation_tokens_total +Inf\n",
    b'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="x1"} 3\n',
    b"this is { not prometheus\n",
])
def test_metrics_no_count_can_be_read_from_are_a_scrape_error(hostile: Any,
                                                               body: bytes) -> None:
    server = hostile({"/metrics": answer(200, body)})
    with httpx.Client() as client, pytest.raises(ScrapeError, match="/metrics"):
        scrape(client, server.url, timeout_s=5)


def test_a_health_that_redirects_elsewhere_is_no_vllm_server(hostile: Any) -> None:
    server = hostile({"/health": answer(302, b"", Location="http://127.0.0.1:9/health")})
    session = ServerSession(AttachedServer(server.url),
                            Watch(900.0, attach_refused_s=0.5)).start()
    try:
        error, took = bounded(session.wait_healthy, 30)
    finally:
        session.close()
    assert isinstance(error, ServerError), error
    assert "no vLLM server (/health: 302)" in error.reason
    assert took < 10


def test_an_attached_smoke_against_a_dripping_health_ends_with_exit_3(
        hostile: Any, tmp_path: Path) -> None:
    server = hostile({"/health": drip, "/metrics": drip, "/version": drip})
    # A generous limit for the process (a fresh session derives vLLM's option table first);
    # the smoke's own clock is what is held.
    done = run_dspark_process("smoke", f"server.url={server.url}", "server.ready_timeout_s=3",
                              f"hydra.run.dir={tmp_path / 'run'}", "--json", cwd=tmp_path,
                              timeout=300)
    assert done.returncode == 3, done.stderr
    report = json.loads(done.stdout)
    assert "/health did not answer 200 within 3 s" in report["verdict"]["summary"]
    assert report["timings"]["total_s"] < 15
    assert "Traceback" not in done.stderr


# -- point 1: a refused run removes only what it made -----------------------------------------
REFUSED = ("smoke", "+hw=cpu", "server.url=http://127.0.0.1:9", "serving.args.max_num_seqs=-1")


def tree(root: Path) -> dict[str, str | None]:
    """Every path under `root` -> a file's text, None for a folder."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_text()
            for p in sorted(root.rglob("*"))}


def test_a_refused_run_keeps_a_directory_that_existed_before_it(tmp_path: Path) -> None:
    run = tmp_path / "D"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "notes.txt").write_text("x\n")
    (run / "mine.txt").write_text("the user's\n")
    before = tree(tmp_path)
    done = run_dspark(*REFUSED, f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "max_num_seqs=-1` is out of range" in done.stderr
    assert tree(tmp_path) == before  # Hydra's three files gone, the user's all there


def test_a_refused_run_removes_the_folders_it_made_and_no_other(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()  # there before the run, empty: stays
    done = run_dspark(*REFUSED, f"hydra.run.dir={tmp_path / 'runs' / 'a' / 'b'}",
                      cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert tree(tmp_path) == {"runs": None}


# -- point 5 and 6: a run directory Hydra must not write into ----------------------------------
def test_a_hydra_folder_that_is_a_link_is_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "D").mkdir()
    (tmp_path / "D" / ".hydra").symlink_to(elsewhere)
    done = run_dspark("smoke", "+hw=cpu", "server.url=http://127.0.0.1:9",
                      f"hydra.run.dir={tmp_path / 'D'}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert ".hydra is a link" in done.stderr and "Traceback" not in done.stderr
    assert list(elsewhere.iterdir()) == [] and os.listdir(tmp_path / "D") == [".hydra"]


def test_a_job_folder_of_a_reused_sweep_with_a_linked_hydra_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "S" / "0").mkdir(parents=True)
    elsewhere.mkdir()
    (tmp_path / "S" / "0" / ".hydra").symlink_to(elsewhere)
    done = run_dspark(REFUSED[0], "-m", *REFUSED[1:], f"hydra.sweep.dir={tmp_path / 'S'}",
                      cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert ".hydra is a link" in done.stderr
    assert list(elsewhere.iterdir()) == [] and os.listdir(tmp_path / "S") == ["0"]


@pytest.mark.parametrize("under", ["", "/x"])
def test_a_run_directory_that_names_a_file_is_a_usage_error(tmp_path: Path, under: str) -> None:
    (tmp_path / "F").write_text("a file\n")
    done = run_dspark("smoke", "+hw=cpu", "server.url=http://127.0.0.1:9",
                      f"hydra.run.dir={tmp_path / 'F'}{under}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "not a directory" in done.stderr and "unexpected" not in done.stderr
    assert (tmp_path / "F").read_text() == "a file\n"


# -- point 3 (and 46.6): a value read from a secret-named variable is a secret -----------------
READ = "+hw.env.MY_VAR=${oc.env:H_API_TOKEN}"


def test_a_value_read_from_a_secret_variable_is_exported_by_reference() -> None:
    done = run_dspark("serve", "+hw=cpu", READ, "--dry-run", env={"H_API_TOKEN": "tok"})
    assert done.returncode == 0, done.stderr
    assert 'export MY_VAR="${MY_VAR:?' in done.stdout
    assert "MY_VAR=tok" not in done.stdout and "MY_VAR='tok'" not in done.stdout
    as_json = run_dspark("serve", "+hw=cpu", READ, "--dry-run", "--json",
                         env={"H_API_TOKEN": "tok"})
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["env"]["MY_VAR"] == "<redacted>"


def test_resolve_does_not_print_a_value_read_from_a_secret_variable() -> None:
    done = run_dspark("serve", "+hw=cpu", READ, "--cfg", "job", "--resolve",
                      env={"H_API_TOKEN": "tok"})
    assert done.returncode == 2, done.stdout
    assert "MY_VAR: tok" not in done.stdout and "--resolve would print" in done.stderr


def test_a_run_record_holds_no_value_read_from_a_secret_variable(tmp_path: Path) -> None:
    from dspark_cli.server.process import free_port
    from tests.smoke_support import smoke_args

    secret = "readtok-5a6b7c8d9e"
    done = run_dspark_process(*smoke_args(free_port(), ["--scenario", "healthy", "--k", "3"],
                                          READ), cwd=tmp_path, env={"H_API_TOKEN": secret},
                              timeout=180)
    assert done.returncode == 0, done.stderr
    written = {p: p.read_text(errors="replace") for p in (tmp_path / "runs").rglob("*")
               if p.is_file()}
    assert {p.name for p in written} >= {"config.yaml", "launch.sh", "provenance.json"}
    assert [str(p) for p, text in written.items() if secret in text] == []
    assert secret not in done.stdout + done.stderr
    launch = next(text for p, text in written.items() if p.name == "launch.sh")
    assert 'export MY_VAR="${MY_VAR:?' in launch


# -- point 6: a sentence and exit 2, never exit 70 ---------------------------------------------
@pytest.mark.parametrize(("value", "said"), [
    ("${oc.env:DSPARK_TEST_SURELY_UNSET}", "DSPARK_TEST_SURELY_UNSET' not found"),
    ("${no.such.key}", "'no.such.key' not found"),
])
def test_an_interpolation_that_does_not_resolve_is_a_usage_error(value: str, said: str) -> None:
    done = run_dspark("serve", "+hw=cpu", f"+hw.env.A={value}", "--dry-run")
    assert done.returncode == 2, done.stderr
    assert "`hw.env.A` cannot be resolved" in done.stderr and said in done.stderr
    assert "unexpected" not in done.stderr


def test_a_300_character_variable_name_is_a_usage_error() -> None:
    done = run_dspark("serve", "+hw=cpu", f"+hw.env.{'A' * 300}=1", "--dry-run")
    assert done.returncode == 2, done.stderr
    assert "a key of 307 bytes is longer" in done.stderr and "unexpected" not in done.stderr


@pytest.mark.parametrize("argv", [("serve", "-sc"), ("env", "--shell-completion"),
                                  ("smoke", "-sc", "install=bash", "query=bash")])
def test_shell_completion_without_one_subcommand_is_a_usage_error(argv: tuple[str, ...]) -> None:
    done = run_dspark(*argv)
    assert done.returncode == 2, done.stderr
    assert "takes one of install=SHELL, uninstall=SHELL or query=SHELL" in done.stderr


@pytest.mark.parametrize("name", ["serve", "env"])
def test_a_completion_query_without_comp_line_is_a_usage_error(name: str) -> None:
    env = dspark_env()
    env.pop("COMP_LINE", None)  # as a person typing it has it: unset
    done = subprocess.run(dspark_argv(name, "-sc", "query=bash"), env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "COMP_LINE, which is not set" in done.stderr and "Traceback" not in done.stderr
