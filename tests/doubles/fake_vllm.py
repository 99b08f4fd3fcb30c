"""A stand-in vLLM server for what a real one cannot show on this machine (GPU faults, hangs).

A real process speaking real HTTP on localhost, printing vLLM-like log lines to stdout:

    python tests/doubles/fake_vllm.py --port P [--host 127.0.0.1] [--scenario NAME] [--k 3]
        [--model tiny] [--speculative NAME] [--boot-delay S] [--print-line TEXT ...]
        [--fault-line TEXT] [--event-file F] [--ignore-sigterm] [--adaptive]
        [--per-request-spec-decode-metrics {none,summary,detailed}] [--per-boot F]

Endpoints: GET /health, GET /metrics (vLLM's Prometheus exposition, written by
prometheus_client like vLLM's own, `_created` samples included), GET /version, GET /v1/models,
POST /v1/completions (OpenAI completions; `max_tokens` tokens with `ignore_eos`; the tokens are
a function of the prompt, so greedy answers repeat across boots; `return_token_ids` gives their
ids, as vLLM's; with --per-request-spec-decode-metrics, vLLM 0.32's per-request
`metrics.speculative_decoding`, whose steps propose fewer than K with --adaptive: fake_engine.py).

Scenarios (what a broken vLLM does; `healthy` is the reference):
    healthy            serves correctly; with --k K, spec counters keep draft_tokens == drafts x K
    gpu_fault          on the first completion, prints a ROCm memory access fault; request hangs
    die_during_request on the first completion, the process kills itself (SIGKILL, no output)
    traceback          on the first completion, prints an engine traceback and answers 500
    short_tokens       generates 7 tokens fewer than asked (usage and counters agree)
    never_healthy      starts, but /health answers 503 forever
    hung_request       completions never answer (a queue hang)
    bad_spec_counters  draft_tokens == drafts x K - 2 (breaks the fixed-K invariant)
    counter_mismatch   vllm:generation_tokens counts 3 tokens more per request than usage says
    preemption         every completion adds one to vllm:num_preemptions
    lossy_speculation  with --speculative other than none, the first answer that returns token
                       ids (a lossless probe) has one token changed: a broken verification
    stalled            after --stall-after completions, the engine stops producing tokens: each
                       later request counts as running, generates STALL_TOKENS tokens, then
                       never another, while /health keeps answering 200 (a decode stall)

With `"stream": true` (what `vllm bench serve` sends) a completion is answered as server-sent
events: one chunk per token, then a usage chunk, then `data: [DONE]`.

--per-boot F: F holds a JSON list, one entry per start of this command (the arguments that start
adds, e.g. ["--scenario", "preemption"]): the n-th start takes entry n (F.boots counts them), so
one bench run's cells can each meet a scenario of their own.

--event-file F: the Unix time at which the scenario's fault line was flushed is written to F
(benchmarks measure fault-line-to-verdict from it). --print-line adds startup lines (e.g.
"DSpark draft model loaded: 97 params") before "Application startup complete.". --fault-line
TEXT: on the first completion, print TEXT (any wording of a fault) and answer 500.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if __package__:
    from .fake_engine import STALL_TOKENS, Engine
else:  # run as a script (`python tests/doubles/fake_vllm.py`): its directory is sys.path[0]
    from fake_engine import STALL_TOKENS, Engine

SCENARIOS = (
    "healthy",
    "gpu_fault",
    "die_during_request",
    "traceback",
    "short_tokens",
    "never_healthy",
    "hung_request",
    "bad_spec_counters",
    "counter_mismatch",
    "preemption",
    "lossy_speculation",
    "stalled",
)
VERSION = "0.32.0"
SCRIPT = Path(__file__).resolve()


def command(port: int, scenario: str = "healthy", *extra: str) -> list[str]:
    """The argv that starts this double (for `server.command=[...]` or subprocess)."""
    return [sys.executable, str(SCRIPT), "--port", str(port), "--scenario", scenario, *extra]


_SAY = threading.Lock()


def say(line: str, flush: bool = True) -> None:
    """One line in one write, under a lock: `print` writes a line and its newline apart, so the
    engine's and the HTTP threads' lines could run together in the log the watcher reads."""
    with _SAY:
        sys.stdout.write(line + "\n")
        if flush:
            sys.stdout.flush()


def log(message: str, prefix: str = "") -> None:
    """Print one vLLM-style INFO line and flush (the watcher reads the file live)."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    say(f"{prefix}INFO {stamp} [fake_vllm.py] {message}", flush=True)


def make_handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    args = engine.args

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *a: object) -> None:
            host, port = self.client_address[:2]
            say(f"INFO:     {host}:{port} - {fmt % a}", flush=True)

        def send_json(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                healthy = engine.ready.is_set() and args.scenario != "never_healthy"
                self.send_response(200 if healthy else 503)
                self.send_header("content-length", "0")
                self.end_headers()
            elif self.path == "/metrics":
                data = generate_latest(engine.registry)
                self.send_response(200)
                self.send_header("content-type", CONTENT_TYPE_LATEST)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif self.path == "/version":
                self.send_json(200, {"version": VERSION})
            elif self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{"id": args.model}]})
            else:
                self.send_json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/v1/completions":
                self.send_json(404, {"detail": "Not Found"})
                return
            if body.get("model") != args.model:
                self.send_json(
                    404,
                    {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                               "type": "NotFoundError", "code": 404}},
                )
                return
            if self.fault_or_hang():
                return
            if engine.stalls():
                self.stall(bool(body.get("stream")))
                return
            prompt = str(body.get("prompt", ""))
            prompt_tokens = max(len(prompt.split()), 1)
            n, steps = engine.generate(prompt_tokens, int(body.get("max_tokens", 16)))
            if body.get("stream"):
                self.send_stream(n, prompt_tokens)
                return
            ids = engine.token_ids(prompt, n, bool(body.get("return_token_ids")))
            self.send_json(
                200,
                {
                    "id": "cmpl-fake",
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": args.model,
                    "choices": [
                        {"index": 0, "text": "".join(f" t{i}" for i in ids), "logprobs": None,
                         "finish_reason": "length", "stop_reason": None,
                         "token_ids": ids if body.get("return_token_ids") else None}
                    ],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                              "total_tokens": prompt_tokens + n},
                    **({"metrics": m} if (m := engine.request_metrics(steps)) else {}),
                },
            )

        def send_stream(self, n: int, prompt_tokens: int) -> None:
            """SSE like vLLM's: a chunk per token, a usage chunk, [DONE]; then close."""
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True
            chunk = {"id": "cmpl-fake", "object": "text_completion", "model": args.model}
            events = [
                {**chunk, "choices": [{"index": 0, "text": " tok", "finish_reason": None}]}
                for _ in range(n)
            ]
            events.append({**chunk, "choices": [], "usage": {
                "prompt_tokens": prompt_tokens, "completion_tokens": n,
                "total_tokens": prompt_tokens + n}})
            body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            self.wfile.write(body.encode())

        def stall(self, stream: bool) -> None:
            """A decode stall: the request runs, a few tokens come, then nothing, forever."""
            if stream:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                chunk = {"id": "cmpl-fake", "object": "text_completion", "model": args.model,
                         "choices": [{"index": 0, "text": " tok", "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode() * STALL_TOKENS)
                self.wfile.flush()
            engine.mark_event()
            threading.Event().wait()

        def fault_or_hang(self) -> bool:
            """The scenario's misbehaviour during a completion; True when it answered."""
            scenario = args.scenario
            if args.fault_line:
                say(args.fault_line, flush=True)
                engine.mark_event()
                self.send_json(500, {"error": {"message": "fault", "code": 500}})
                return True
            if scenario == "gpu_fault":
                say(
                    "Memory access fault by GPU node-2 (Agent handle: 0x55d1c0a8e2f0) on address "
                    "0x7f3a10000000. Reason: Page not present or supervisor privilege.",
                    flush=True,
                )
                engine.mark_event()
                threading.Event().wait()
            elif scenario == "die_during_request":
                engine.mark_event()
                os.kill(os.getpid(), signal.SIGKILL)
            elif scenario == "traceback":
                prefix = f"(EngineCore_DP0 pid={os.getpid()}) "
                say(
                    f"{prefix}ERROR {time.strftime('%m-%d %H:%M:%S')} [core.py:1042] "
                    "EngineCore encountered a fatal error.\n"
                    f"{prefix}Traceback (most recent call last):\n"
                    f'{prefix}  File "vllm/v1/engine/core.py", line 1033, in run_engine_core\n'
                    f"{prefix}    engine_core.run_busy_loop()\n"
                    f"{prefix}RuntimeError: fake_vllm: simulated engine failure",
                    flush=True,
                )
                engine.mark_event()
                self.send_json(
                    500,
                    {"error": {"message": "EngineCore encountered an issue.",
                               "type": "InternalServerError", "code": 500}},
                )
                return True
            elif scenario == "hung_request":
                engine.mark_event()
                threading.Event().wait()
            return False

    return Handler


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fake_vllm", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--scenario", choices=SCENARIOS, default="healthy")
    p.add_argument("--k", type=int, default=0, help="num_speculative_tokens (0: no drafter)")
    p.add_argument("--model", default="tiny", help="served model name")
    p.add_argument("--speculative", default="none",
                   help="the speculative profile this server stands for (lossy_speculation)")
    p.add_argument("--boot-delay", type=float, default=0.2)
    p.add_argument("--print-line", action="append", default=[])
    p.add_argument("--fault-line")
    p.add_argument("--event-file")
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--adaptive", action="store_true",
                   help="some verify steps propose fewer than K (adaptive verification)")
    p.add_argument("--per-request-spec-decode-metrics", choices=("none", "summary", "detailed"),
                   default="none", help="answer each completion's verify steps (vLLM 0.32)")
    p.add_argument("--per-boot", help="a JSON list: each start's own arguments, in order")
    p.add_argument("--stall-after", type=int, default=0,
                   help="stalled: completions served before the engine stops")
    return p.parse_args(argv)


def per_boot(argv: list[str], path: str) -> list[str]:
    """This start's own arguments from `path`'s list (the n-th start: entry n)."""
    counter = Path(f"{path}.boots")
    n = len(counter.read_text().splitlines()) if counter.exists() else 0
    with counter.open("a") as f:
        f.write(f"{os.getpid()}\n")
    extra = [str(a) for a in json.loads(Path(path).read_text())[n]]
    log(f"start {n + 1}: per-boot arguments {' '.join(extra)}")
    return [*argv, *extra]


class QuietDisconnects(ThreadingHTTPServer):
    """A client that hangs up mid-answer (a load generator under a loaded machine) is routine
    for a real vLLM and prints no traceback; only the scenarios' faults may look fatal."""

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            say(f"INFO:     client {client_address} disconnected", flush=True)
        else:
            super().handle_error(request, client_address)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.per_boot:
        args = parse_args(per_boot(argv, args.per_boot))
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log(f"vLLM API server version {VERSION}")
    log(f"non-default args: {{'model_tag': {args.model!r}, 'port': {args.port}}}")
    tmp = os.environ.get("TMPDIR")
    log(f"TMPDIR {tmp} exists={tmp is not None and os.path.isdir(tmp)}")  # a dead scratch dir
    engine = Engine(args)
    server = QuietDisconnects((args.host, args.port), make_handler(engine))
    server.daemon_threads = True
    log(f"Starting vLLM server on http://{args.host}:{args.port}")
    say(f"INFO:     Started server process [{os.getpid()}]", flush=True)
    say("INFO:     Waiting for application startup.", flush=True)

    def boot() -> None:
        time.sleep(args.boot_delay)
        prefix = f"(EngineCore_DP0 pid={os.getpid()}) "
        for line in args.print_line:
            log(line, prefix)
        if args.scenario == "never_healthy":
            return
        # The line first, as uvicorn logs it before answering: a request answered between the
        # two would otherwise be logged before it (a stall's log tail read it as pre-startup).
        say("INFO:     Application startup complete.", flush=True)
        engine.ready.set()

    threading.Thread(target=boot, daemon=True).start()
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
