"""The fatal log families (conf/logs/vllm.yaml) match what vLLM really prints, both ways.

The messages are read out of the installed vLLM's source (string constants and f-strings found
with `ast`, rendered with sample arguments the way the logger would), so a vLLM that rewords a
death message breaks this test instead of a smoke that passes a dead server. Wordings of other
versions and of the GPU runtimes, which are not in this vLLM's source, are listed literally.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from dspark_cli.paths import conf_dir
from dspark_cli.server.logscan import Pattern, compile_patterns, scan_lines
from tests.smoke_support import run_smoke

PREFIX = "(EngineCore_DP0 pid=4242) ERROR 11-30 18:00:00 [x.py:1] "


@cache
def families() -> tuple[Pattern, ...]:
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("logs/vllm")
    return compile_patterns(dict(cfg.logs.fatal))


def _text(node: ast.AST) -> str | None:
    """A string constant, or an f-string with each placeholder as `{}`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


@cache
def _strings(relpath: str) -> tuple[str, ...]:
    spec = importlib.util.find_spec("vllm")  # found, not imported
    assert spec is not None and spec.origin, "vLLM is not installed"
    tree = ast.parse((Path(spec.origin).parent / relpath).read_text())
    return tuple(t for node in ast.walk(tree) if (t := _text(node)) is not None)


def source_message(relpath: str, needle: str, *args: str) -> str:
    """The message in vLLM's source file that contains `needle`, rendered with `args`."""
    found = [s for s in _strings(relpath) if needle in s]
    assert found, f"vLLM's {relpath} no longer holds a message with {needle!r}"
    values = iter(args)
    return re.sub(r"%[sdr]|\{\}", lambda _: next(values, "X"), found[0])


# (family, vLLM source file, a piece of the message, logger arguments)
FROM_SOURCE = [
    ("worker_died", "v1/executor/multiproc_executor.py", "died unexpectedly", "VllmWorker-0",
     "-4"),
    ("worker_died", "v1/executor/multiproc_executor.py", "WorkerProc hit an exception"),
    ("worker_died", "v1/executor/multiproc_executor.py", "WorkerProc failed to start"),
    ("worker_died", "v1/executor/multiproc_executor.py", "WorkerProc failed."),
    ("ray_worker_died", "v1/executor/ray_executor_v2.py", "died unexpectedly", "[0, 3]"),
    ("ray_worker_died", "v1/executor/ray_executor_v2.py", "RayWorkerProc failed", "boom"),
    ("engine_core_died", "v1/utils.py", "died unexpectedly", "EngineCore_DP0"),
    ("engine_core_died", "v1/engine/core_client.py", "engine core exited unexpectedly"),
    ("engine_core_failed", "v1/engine/core.py", "EngineCore failed to start"),
    ("engine_core_failed", "v1/engine/core.py", "EngineCore encountered a fatal error"),
    ("engine_core_failed", "v1/engine/utils.py", "Engine core initialization failed",
     "{'EngineCore_DP0': 1}"),
    ("engine_dead", "v1/engine/exceptions.py", "EngineCore encountered an issue"),
    ("nccl_error", "distributed/device_communicators/pynccl_wrapper.py", "NCCL error",
     "unhandled cuda error (run with NCCL_DEBUG=INFO for details)"),
    ("out_of_memory", "v1/worker/gpu_model_runner.py", "CUDA out of memory occurred", "256"),
]

# What other vLLM versions, torch, Ray and the GPU runtimes print (not in this vLLM's source).
KNOWN_VARIANTS = [
    ("engine_core_died", "Engine core proc EngineCore_DP0 died unexpectedly, shutting down "
     "client."),
    ("engine_core_died", "ERROR [core_client.py:564] Engine core process EngineCore_DP1 died "
     "unexpectedly."),
    ("worker_died", "Worker proc VllmWorker-3 died unexpectedly, shutting down executor."),
    ("worker_died", "WorkerProc VllmWorker-1 died unexpectedly"),
    ("ray_worker_died", "ray.exceptions.ActorDiedError: The actor died unexpectedly before "
     "finishing this task."),
    ("ray_worker_died", "ray.exceptions.RayActorError: The actor died because of an error "
     "raised in its creation task"),
    ("ray_worker_died", "A worker died or was killed while executing a task by an unexpected "
     "system error. To troubleshoot the problem, check the logs for the dead worker."),
    ("engine_dead", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
     "issue. See stack trace (above) for the root cause."),
    ("engine_dead", "raise EngineDeadError() from e"),
    ("hsa_error", ":0:rocdevice.cpp:2891: Callback: Queue aborting with error : "
     "HSA_STATUS_ERROR_MEMORY_FAULT: Agent attempted to access an inaccessible address."),
    ("hsa_error", "Callback: Queue 0x7f0 aborting with error : HSA_STATUS_ERROR_EXCEPTION: An "
     "HSAIL operation resulted in a hardware exception. code: 0x1016"),
    ("hsa_error", "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate"),
    ("rocm_memory_fault", "Memory access fault by GPU node-2 (Agent handle: 0x55d1) on address "
     "0x7f3a. Reason: Page not present or supervisor privilege."),
    ("gpu_hang", "HW Exception by GPU node-3 (Agent handle: 0x5619) reason :GPU Hang"),
    ("illegal_memory_access", "RuntimeError: CUDA error: an illegal memory access was "
     "encountered"),
    ("illegal_memory_access", "torch.AcceleratorError: HIP error: an illegal memory access was "
     "encountered"),
    ("illegal_memory_access", "Exception raised from c10_cuda_check_implementation: "
     "cudaErrorIllegalAddress"),
    ("illegal_memory_access", "hipErrorIllegalAddress at csrc/kernels.cu:120"),
    ("launch_failure", "RuntimeError: CUDA error: unspecified launch failure"),
    ("launch_failure", "RuntimeError: HIP error: unspecified launch failure"),
    ("out_of_memory", "RuntimeError: CUDA error: out of memory"),
    ("gpu_error", "RuntimeError: CUDA error: device-side assert triggered"),
    ("gpu_error", "torch.AcceleratorError: HIP error: invalid device function"),
    ("gpu_error", "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
     "`cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b)`"),
    ("gpu_error", "../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], "
     "thread: [0,0,0] Assertion `idx >= 0` failed. device-side assert triggered"),
    ("nccl_error", "torch.distributed.DistBackendError: NCCL error in: "
     "../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error"),
    ("nccl_error", "ncclSystemError: System call (e.g. socket, malloc) or external library call "
     "failed or device error."),
    ("nccl_error", "RuntimeError: RCCL error: internal error - please report this issue"),
    ("nccl_error", "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
     "OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."),
    ("out_of_memory", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
     "GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free."),
    ("out_of_memory", "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.00 GiB."),
    ("out_of_memory", "torch.cuda.OutOfMemoryError: CUDA out of memory."),
    ("out_of_memory", "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. "
     "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741824 bytes."),
    ("fatal_python_error", "Fatal Python error: Illegal instruction"),
    ("fatal_python_error", "Fatal Python error: Segmentation fault"),
    ("traceback", "(EngineCore_DP0 pid=1) Traceback (most recent call last):"),
]

# Lines a healthy vLLM prints that mention errors, memory, NCCL or death harmlessly.
BENIGN_FROM_SOURCE = [
    ("v1/worker/cpu_worker.py", "is not found in LD_PRELOAD", "libtcmalloc"),
    ("v1/worker/cpu_worker.py", "Speculative decoding on CPU without Intel OpenMP"),
    ("v1/executor/ray_executor.py", "If you see error log"),
    ("model_executor/model_loader/weight_utils.py", "This may cause out-of-memory errors",
     "80.00", "64.00"),
]
BENIGN = [
    "INFO 11-30 18:00:00 [api_server.py:1880] vLLM API server version 0.32.0",
    "INFO 11-30 18:00:01 [gpu_worker.py:300] Available KV cache memory: 61.25 GiB",
    "INFO 11-30 18:00:01 [kv_cache_utils.py:1000] GPU KV cache size: 2,006,720 tokens",
    "INFO 11-30 18:00:01 [gpu_model_runner.py:2001] Model loading took 80.1 GiB memory",
    "INFO 11-30 18:00:02 [parallel_state.py:1200] Using Ray's NCCL communicator for Ray "
    "Compiled Graph communication.",
    "WARNING 11-30 18:00:02 [core.py:1652] Disabling NCCL for DP synchronization when using "
    "async scheduling.",
    "WARNING 11-30 18:00:02 [utils.py:50] To reduce the risk of out-of-memory errors, lower "
    "gpu_memory_utilization",
    "WARNING 11-30 18:00:02 [x.py:1] The following error message 'operation scheduled before "
    "its operands' can be ignored.",
    "INFO 11-30 18:00:03 [loggers.py:248] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
    "Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%",
    "INFO 11-30 18:00:03 [multiproc_executor.py:700] Worker proc VllmWorker-0 started",
    "INFO 11-30 18:00:04 [launcher.py:40] Shutting down FastAPI HTTP server.",
    'INFO:     127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK',
    'INFO:     127.0.0.1:5000 - "GET /error_stats HTTP/1.1" 404 Not Found',
    "INFO:     Application startup complete.",
]


def matched(line: str) -> list[str]:
    return [e.pattern for e in scan_lines([line], families(), max_events=50).fatal]


@pytest.mark.vllm
@pytest.mark.parametrize(("family", "relpath", "needle", "args"),
                         [(f, p, n, a) for f, p, n, *a in FROM_SOURCE])
def test_each_family_matches_the_installed_vllms_own_message(
        family: str, relpath: str, needle: str, args: list[str]) -> None:
    line = PREFIX + source_message(relpath, needle, *args)
    assert matched(line) == [family], line


@pytest.mark.parametrize(("family", "line"), KNOWN_VARIANTS)
def test_each_family_matches_other_versions_and_runtimes(family: str, line: str) -> None:
    assert matched(PREFIX + line) == [family]


def test_every_family_is_shown_to_match_something() -> None:
    shown = {f for f, *_ in FROM_SOURCE} | {f for f, _ in KNOWN_VARIANTS}
    assert {p.name for p in families()} == shown


@pytest.mark.parametrize("line", BENIGN)
def test_benign_lines_match_no_family(line: str) -> None:
    assert matched(line) == []


@pytest.mark.vllm
@pytest.mark.parametrize(("relpath", "needle", "args"),
                         [(p, n, tuple(a)) for p, n, *a in BENIGN_FROM_SOURCE])
def test_vllms_own_benign_warnings_match_no_family(relpath: str, needle: str,
                                                    args: tuple[str, ...]) -> None:
    line = f"WARNING 11-30 18:00:00 [x.py:1] {source_message(relpath, needle, *args)}"
    assert matched(line) == []


def test_smoke_fails_on_the_newer_engine_core_death_line(tmp_path: Path) -> None:
    # Quoted: the line's comma would split Hydra's list `server.command=[...]`.
    line = "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client."
    code, report, stderr = run_smoke(tmp_path, "healthy", fake_args=("--fault-line", f"'{line}'"))
    assert code == 1, report["verdict"]
    fatal = next(c for c in report["checks"] if c["name"] == "no_fatal_lines")
    assert fatal["status"] == "failed"
    assert [e["pattern"] for e in fatal["data"]["events"]] == ["engine_core_died"]
    assert "verdict: FAIL" in stderr
