"""vLLM's own `vllm bench serve` as the load generator: one process for many phases.

`phase_argv` is pure (phase + protocol + dataset + plan -> argv), so a dry run prints exactly
what each phase runs: `LoadGenerator` hands that line's arguments to vLLM's own
`vllm.benchmarks.serve` in a process that imported it once (`loadgen_worker.py`), the same
requests and result file as `vllm bench serve` with that line, without paying vLLM's import
(seconds) per phase. Every phase skips vLLM's initial test request
(`--ready-check-timeout-sec 0`): the server is already healthy, and an extra request inside the
measured phase would put tokens on the server's counters that the client does not report.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_cli.bench.dataset import DatasetSpec
from dspark_cli.bench.goodput import Objectives, loadgen_flags
from dspark_cli.bench.protocol import Phase, Sampling
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.server import watchdog
from dspark_cli.server.watchdog import descendants, stop_group
from dspark_cli.vllm.shim import require_engine

# The latency metrics and percentiles asked of vLLM; its result file then holds
# `p<percentile>_<metric>_ms` for each pair (e.g. p99_itl_ms).
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
LATENCY_PERCENTILES = (50, 90, 99)

# Per-request arrays in vLLM's result file; the cell record keeps only the scalars.
_PER_REQUEST = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
)


def dataset_args(dataset: DatasetSpec, output_tokens: int) -> list[str]:
    """The dataset flags of one phase: the request set and its output length."""
    out = str(output_tokens)
    if dataset.kind == "speed_bench":
        return [
            "--dataset-name", "speed_bench",
            "--dataset-path", str(dataset.path),
            "--speed-bench-dataset-subset", str(dataset.subset),
            "--speed-bench-output-len", out,
        ]  # fmt: skip
    if dataset.kind == "jsonl":
        return [
            "--dataset-name", "custom",
            "--dataset-path", str(dataset.path),
            "--custom-output-len", out,
        ]  # fmt: skip
    return [
        "--dataset-name", "random",
        "--random-input-len", str(dataset.input_tokens),
        "--random-output-len", out,
    ]  # fmt: skip


def phase_argv(
    phase: Phase,
    sampling: Sampling,
    dataset: DatasetSpec,
    plan: LaunchPlan,
    result_dir: Path,
    base_url: str | None = None,
    objectives: Objectives | None = None,
) -> list[str]:
    """The `vllm bench serve` command line of one phase against the plan's server (or the one
    at `base_url`: a cluster deployment's head); the measured phase counts goodput under the
    protocol's `objectives`."""
    argv = [
        "vllm", "bench", "serve",
        "--backend", "openai",
        "--base-url", base_url or plan.base_url,
        "--endpoint", "/v1/completions",
        "--model", plan.model_path,
        "--served-model-name", plan.served_model_name,
        "--tokenizer", plan.model_path,
        *dataset_args(dataset, phase.output_tokens),
        "--num-prompts", str(phase.num_prompts),
        "--max-concurrency", str(phase.concurrency),
        "--request-rate", "inf",
        "--temperature", str(sampling.temperature),
        "--top-p", str(sampling.top_p),
        "--seed", str(dataset.seed),
        "--ready-check-timeout-sec", "0",
        "--percentile-metrics", ",".join(LATENCY_METRICS),
        "--metric-percentiles", ",".join(map(str, LATENCY_PERCENTILES)),
        "--disable-tqdm",
        "--save-result",
        "--result-dir", str(result_dir),
        "--result-filename", result_filename(phase),
    ]  # fmt: skip
    if plan.arg("tokenizer_mode"):
        argv += ["--tokenizer-mode", str(plan.arg("tokenizer_mode"))]
    if plan.arg("trust_remote_code"):
        argv.append("--trust-remote-code")
    if sampling.ignore_eos:
        argv.append("--ignore-eos")
    if phase.measured:
        argv += loadgen_flags(objectives)
    return argv


def result_filename(phase: Phase) -> str:
    return f"{phase.name}.result.json"


@dataclass(frozen=True)
class PhaseRun:
    phase: Phase
    returncode: int | None  # None: killed at the timeout
    duration_s: float
    log: Path
    result: dict[str, Any] | None  # vLLM's result file, when it wrote one
    aborted: str | None = None  # why the phase was stopped early

    @property
    def error(self) -> str | None:
        """Why this phase does not count, or None."""
        if self.aborted:
            return f"{self.phase.name}: stopped after {self.duration_s:.0f} s: {self.aborted}"
        if self.returncode is None:
            return f"{self.phase.name}: load generator timed out after {self.duration_s:.0f} s"
        if self.returncode != 0:
            return (
                f"{self.phase.name}: vllm bench serve ended with {self.returncode} "
                f"(log: {self.log})"
            )
        if self.result is None:
            return f"{self.phase.name}: load generator wrote no result file"
        return None


def scalars(result: dict[str, Any]) -> dict[str, Any]:
    """vLLM's result without the per-request arrays (those stay in the phase's own file)."""
    return {k: v for k, v in result.items() if k not in _PER_REQUEST}


def latency_ms(result: Mapping[str, Any] | None) -> dict[str, dict[str, float]]:
    """The percentiles of vLLM's result as {metric: {"p50": ms, ...}}; what it lacks is left
    out (an older result, or a metric vLLM did not compute)."""
    out: dict[str, dict[str, float]] = {}
    for metric in LATENCY_METRICS:
        values = {f"p{p}": float(v) for p in LATENCY_PERCENTILES
                  if isinstance(v := (result or {}).get(f"p{p}_{metric}_ms"), int | float)}
        if values:
            out[metric] = values
    return out


# The load-generator process (loadgen_worker.py) under the current interpreter.
WORKER = (sys.executable, "-m", "dspark_cli.bench.loadgen_worker")


class LoadGenerator:
    """One load-generator process that runs phase after phase (`run`): vLLM's benchmark code
    imported once, not once per phase. Started under the watchdog, at once (its import
    overlaps the server's boot; the first phase waits for it); stdin closed at `close`.

    A phase that stalls or times out kills the process and all it started (no grace: a phase
    cut short is discarded, not asked to finish); every later `run` then fails at once, saying
    so, and the caller starts a new one for the next cell. `command` is the process to start
    (default: `WORKER`); its output outside phases goes to `log`."""

    def __init__(self, env: Mapping[str, str], log: Path,
                 command: Sequence[str] = WORKER) -> None:
        require_engine()
        self.log = log
        self.started_at = time.monotonic()
        self.import_s: float | None = None  # the worker's own import of vLLM's bench code
        self.phases = 0
        self.ended: str | None = None  # why no more phases run here
        self._buffer = b""
        with log.open("ab") as out:
            self.proc = watchdog.popen(list(command), 0.0, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=out,
                                       env={**os.environ, **env})

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def usable(self) -> bool:
        return self.ended is None and self.proc.poll() is None

    def describe(self) -> dict[str, Any]:
        """For the cell's record: which process ran its phases."""
        return {"pid": self.pid, "log": str(self.log), "import_s": self.import_s,
                "phases": self.phases}

    def run(self, argv: Sequence[str], phase: Phase, result_dir: Path, timeout_s: float,
            abort: Callable[[], str | None] = lambda: None, poll_s: float = 0.2) -> PhaseRun:
        """Run one phase (`argv`: `vllm bench serve ...`, the same line a phase of its own
        would run), its output to `<phase>.log`, under `timeout_s` (waiting for the process's
        import included). Stops early, killing the process, when `abort()` names a reason,
        e.g. the server died or stalled: a hung phase would otherwise wait out its timeout."""
        log = result_dir / f"{phase.name}.log"
        result_path = result_dir / result_filename(phase)
        start = time.monotonic()
        if not self.usable:
            why = self.ended or f"it exited with {self.proc.poll()}"
            log.write_text(f"not run: the load generator is gone ({why})\n")
            return PhaseRun(phase, None, 0.0, log, None, f"the load generator is gone ({why})")
        self.phases += 1
        try:
            answer = self._answer(start, timeout_s, abort, poll_s) if self.import_s is None \
                else {}
            if isinstance(answer, dict):
                if self.import_s is None:  # its first answer: vLLM's bench code imported
                    self.import_s = float(answer.get("import_s") or 0.0)
                self._send({"argv": list(argv[3:]), "log": str(log)})
                answer = self._answer(start, timeout_s, abort, poll_s)
        except BaseException:
            self.kill("interrupted")
            raise
        code, aborted = answer if isinstance(answer, tuple) else (
            answer["returncode"] if isinstance(answer.get("returncode"), int) else 1, None)
        duration = time.monotonic() - start
        if code is None and aborted is None:
            self.kill(f"{phase.name} timed out")
        elif aborted:
            self.kill(f"{phase.name} stopped: {aborted}")
        result = None
        if code == 0 and result_path.is_file():
            try:
                result = json.loads(result_path.read_text())
            except json.JSONDecodeError:
                result = None
        return PhaseRun(phase, code, duration, log, result, aborted)

    def _send(self, spec: Mapping[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(spec) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:  # it ended; `_answer` reads its exit code
            pass

    def _answer(self, start: float, timeout_s: float, abort: Callable[[], str | None],
                poll_s: float) -> dict[str, Any] | tuple[int | None, str | None]:
        """The process's next answer line, or (exit code, None) when it ended without one,
        (None, reason) when `abort()` named one, (None, None) at the timeout."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], poll_s)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    code = self.proc.wait()
                    self.ended = f"it exited with {code}"
                    return code or 1, None
                self._buffer += chunk
                continue
            if (aborted := abort()) is not None:
                return None, aborted
            if time.monotonic() - start > timeout_s:
                return None, None
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            answer = json.loads(line)
        except json.JSONDecodeError:
            answer = None
        if not isinstance(answer, dict):
            self.ended = "it answered something other than JSON"
            return 1, None
        return answer

    def kill(self, why: str) -> None:
        """At once, with whatever it started."""
        self.ended = self.ended or why
        stop_group(self.proc.pid, grace=0.0, also=descendants(self.proc.pid))
        self.proc.wait()
        self._close_pipes()

    def close(self) -> None:
        """No more phases: stdin closed, the process ends (killed if it lingers)."""
        self.ended = self.ended or "closed"
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                self.kill("closed")
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


CLOSE_WAIT_S = 10.0  # for a process whose stdin was closed to end
