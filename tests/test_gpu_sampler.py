"""The GPU sampler (`dspark_cli/machine/gpu_sampler.py`) against a test double of nvidia-smi that
is a real process looping with -lms, as the real tool does: per-GPU means, the idle and throttle
flags, an older driver's missing field, no tool at all, and nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dspark_cli.machine.gpu_sampler import GpuSampler, find_tool, record, summarize
from tests.conftest import dspark_env
from tests.fake_gpu import fake_sampling_host


def sample_cli(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dspark_cli.machine.gpu_sampler", *args],
                          capture_output=True, text=True, timeout=60, env=dspark_env(env),
                          cwd=tmp_path)


def test_standalone_sampling_means_and_flags(tmp_path: Path) -> None:
    env = fake_sampling_host(tmp_path / "bin", "h200x8", "--util", "3=2", "--throttle", "1=0x40")
    out = tmp_path / "gpus.json"
    done = sample_cli(tmp_path, env, "--interval", "0.1", "--duration", "1.5", "--out",
                      str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["tool"] == "nvidia-smi" and doc["error"] is None
    measured = {g["gpu"]: g for g in doc["measured"]}
    assert sorted(measured, key=int) == [str(i) for i in range(8)]
    assert all(g["samples"] >= 5 for g in measured.values()), doc["samples"]
    assert measured["0"]["means"] == {"utilization_pct": 90.0, "memory_used_mib": 120000.0,
                                      "power_w": 612.5, "sm_clock_mhz": 1980.0,
                                      "temperature_c": 61.0}
    assert measured["3"]["idle"] and not measured["0"]["idle"]
    assert measured["1"]["throttled_share"] == 1.0 and measured["0"]["throttled_share"] == 0.0
    assert doc["flags"] == [
        "GPU 3 sat idle in the measured phase (mean utilisation 2.0% < 10%)",
        "GPU 1 throttled in 100% of the measured phase's samples (power or thermal slowdown)"]
    assert len(doc["all_samples"]["rows"]) == doc["samples"]
    assert json.loads(done.stdout)["flags"] == doc["flags"]


def test_an_older_driver_without_the_throttle_field_still_samples(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = fake_sampling_host(tmp_path / "bin", "h200x8", "--no-throttle-field")
    monkeypatch.setenv("PATH", env["PATH"])
    assert find_tool() == "nvidia-smi"
    sampler = GpuSampler(0.05, "nvidia-smi").start()
    time.sleep(0.8)
    samples = sampler.stop()
    assert samples and sampler.error is None
    (gpu0, *_) = summarize(samples)
    assert gpu0.means["utilization_pct"] == 90.0 and gpu0.throttled_share is None
    doubles = [p for p in psutil.process_iter(["cmdline"])
               if "fake_nvidia_smi.py" in " ".join(p.info["cmdline"] or [])]
    assert not doubles, "the sampling tool outlived stop()"


def test_the_measured_window_only(tmp_path: Path) -> None:
    from dspark_cli.machine.gpu_sampler import Sample

    busy = (95.0, 1.0, 500.0, 1900.0, 60.0, 0.0)
    idle = (0.0, 1.0, 90.0, 300.0, 40.0, 1.0)
    samples = [Sample(t, "0", idle if t < 5 else busy) for t in range(10)]
    doc = record("nvidia-smi", 1.0, samples, (5.0, 9.0), 10.0)
    assert doc["measured"][0]["means"]["utilization_pct"] == 95.0 and not doc["flags"]
    assert doc["whole_run"][0]["means"]["utilization_pct"] == 47.5


def test_no_tool_says_so(tmp_path: Path) -> None:
    done = sample_cli(tmp_path, {"PATH": str(tmp_path)}, "--duration", "0.1")
    assert done.returncode == 1
    assert "no vendor tool (nvidia-smi, amd-smi, rocm-smi)" in done.stderr


@pytest.mark.vllm  # the cell's load generator is vLLM's own `vllm bench serve`
def test_every_cell_records_its_gpus_under_load(tmp_path: Path) -> None:
    """A bench cell against the fake vLLM on a host whose nvidia-smi (the double, detected as
    no GPU so the cpu profile still fits) samples 8 GPUs, GPU 5 idle: cell.json `gpus` holds
    the per-GPU means over the measured phase and the idle flag; every sample is in gpus.json."""
    from dspark_cli.server.process import free_port
    from tests.test_bench_rules import bench_argv, cell_record

    env = fake_sampling_host(tmp_path / "bin", "h200x8", "--util", "5=1", "--detect-as",
                             "no-gpu")
    done = subprocess.run(
        [*bench_argv(free_port(), "healthy", "bench.arm=none", "bench.concurrency=2",
                     "bench.lossless.enabled=false", "watch.gpu_interval_s=0.1"),
         f"hydra.run.dir={tmp_path / 'run'}", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=dspark_env(env))
    assert done.returncode == 0, done.stderr[-3000:]
    gpus = cell_record(tmp_path, "none-c2")["gpus"]
    assert gpus["tool"] == "nvidia-smi" and gpus["error"] is None
    assert gpus["window_s"][1] > gpus["window_s"][0]
    measured = {g["gpu"]: g for g in gpus["measured"]}
    assert len(measured) == 8 and measured["0"]["means"]["power_w"] == 612.5
    assert gpus["flags"] == ["GPU 5 sat idle in the measured phase (mean utilisation 1.0% < 10%)"]
    rows = json.loads((tmp_path / "run/cells/none-c2/gpus.json").read_text())["rows"]
    assert len(rows) == gpus["samples"] > len(gpus["measured"])


GPU_TOOLS = Path(__file__).parent / "data" / "gpu_tools"


def _fixture(name: str) -> str:
    """A recorded output, its `#` header (where its format comes from) left out."""
    return "".join(line for line in (GPU_TOOLS / name).read_text().splitlines(keepends=True)
                   if not line.startswith("#"))


@pytest.mark.parametrize(("tool", "fixture", "want"), [
    # GPU 0 under load and throttled; GPU 1 with its usage section "N/A" and no hotspot
    ("amd-smi", "amd_smi_metric.json",
     {"0": (97.0, 171204.0, 618.0, 1843.0, 71.0, "throttled"),
      "1": (None, 283.0, 140.0, None, 38.0, 0.0)}),
    # card1: a secondary die without power, in deep sleep, its junction sensor N/A
    ("rocm-smi", "rocm_smi.json",
     {"0": (96.0, 171204.1, 612.0, 1843.0, 69.0, None),
      "1": (0.0, 283.0, None, 133.0, 37.0, None)}),
])
def test_amd_tools_are_read_in_the_format_their_source_prints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str, fixture: str,
        want: dict[str, tuple]) -> None:
    """A stand-in of the tool on PATH (a real process) prints the output its own source builds
    (tests/data/gpu_tools/, each with the repository, path and commit it follows); the sampler
    asks it as it asks the real one and reads every field, "N/A" as unknown."""
    from dspark_cli.machine.gpu_sampler import FIELDS, THROTTLE_BITS

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "out.json").write_text(_fixture(fixture))
    calls = tmp_path / "calls"
    script = bin_dir / tool
    script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\ncat {bin_dir / "out.json"}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    sampler = GpuSampler(0.1, tool).start()
    time.sleep(0.5)
    samples = sampler.stop()
    assert sampler.error is None and samples, sampler.error
    assert "--json" in calls.read_text().split()
    got = {s.gpu: s.values for s in samples}
    expected = {gpu: tuple(float(THROTTLE_BITS) if v == "throttled" else v for v in row)
                for gpu, row in want.items()}
    assert got == expected, dict(zip(FIELDS, got.get("0", ()), strict=False))
    assert len(samples) >= 2 * len(want)  # asked again every interval
