"""vLLM's own `vllm bench serve` as the load generator: one process per phase.

`phase_argv` is pure (phase + protocol + dataset + plan -> argv), so a dry run prints exactly
what a real run executes. Every phase skips vLLM's initial test request
(`--ready-check-timeout-sec 0`): the server is already healthy, and an extra request inside the
measured phase would put tokens on the server's counters that the client does not report.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_cli.bench.dataset import DatasetSpec
from dspark_cli.bench.goodput import Objectives, loadgen_flags
from dspark_cli.bench.protocol import Phase, Sampling
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.server import watchdog
from dspark_cli.server.groups import descendants, stop_group
from dspark_cli.vllm.shim import vllm_command

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
                f"{self.phase.name}: load generator exited with {self.returncode} "
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


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """At once (no grace), with whatever it started: a phase cut short is discarded, not
    asked to finish."""
    stop_group(proc.pid, grace=0.0, also=descendants(proc.pid))
    proc.wait()


def run_phase(
    argv: list[str],
    phase: Phase,
    result_dir: Path,
    env: dict[str, str],
    timeout_s: float,
    abort: Callable[[], str | None] = lambda: None,
    poll_s: float = 0.2,
) -> PhaseRun:
    """Run one phase (`argv`: `vllm bench serve ...`) as a process of its own under the
    watchdog, output to `<phase>.log`. Stops early (killing the load generator's process
    group) when `abort()` names a reason, e.g. the server died or stalled: a hung phase would
    otherwise wait out its timeout."""
    log = result_dir / f"{phase.name}.log"
    result_path = result_dir / result_filename(phase)
    start = time.monotonic()
    code: int | None = None
    aborted = None
    with log.open("wb") as out:
        proc = watchdog.popen(vllm_command(argv), 0.0, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env={**os.environ, **env})
        try:
            while True:
                try:
                    code = proc.wait(poll_s)
                    break
                except subprocess.TimeoutExpired:
                    pass
                aborted = abort()
                if aborted or time.monotonic() - start > timeout_s:
                    _kill(proc)
                    code = None
                    break
        except BaseException:
            _kill(proc)
            raise
    duration = time.monotonic() - start
    result = None
    if code == 0 and result_path.is_file():
        try:
            result = json.loads(result_path.read_text())
        except json.JSONDecodeError:
            result = None
    return PhaseRun(phase, code, duration, log, result, aborted)
