"""`dspark bench` as a user runs it, without booting anything: the seed protocol's dry run, the
JSON plan, and bad input turned into one-paragraph errors with documented exit codes."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_dspark
from tests.test_prepare_speed_bench import prepared

SEED = ("bench", "bench=speed_bench_throughput_1k", "+hw=mi350x")


def test_the_seed_protocol_dry_run_is_a_summary_under_the_run_directory(
        tmp_path: Path) -> None:
    pin = prepared(tmp_path)
    done = run_dspark(*SEED, *pin, "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert len(out.splitlines()) < 40 and "vllm serve" not in out
    assert ("# cells: 21, each on its own cold server (21 cold boots); requests: 21168 (18480 "
            "measured)") in out
    # 21 boots of 600 s, plus each cell's waves of requests at full length and 8 greedy
    # prompts x 32 tokens, at 40 tokens/s (bench.estimate)
    waves = sum(-(-64 // 32) * 256 + -(-64 // c) * 256 + -(-880 // c) * 2048
                for c in (256, 128, 64, 32, 16, 8, 4)) * 3
    hours = (21 * 600 + (waves + 21 * 8 * 32) / 40) / 3600
    assert f"# estimated wall time: about {hours:.1f} h (assumes a 600 s boot" in out
    assert re.search(rf"^# run directory: {re.escape(str(tmp_path))}/runs/bench/\d{{8}}-\d{{6}}$",
                     out, re.M), out
    assert "--commands" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "release"]  # nothing written


def test_the_seed_protocol_dry_run_commands_print_every_cell_and_phase(tmp_path: Path) -> None:
    pin = prepared(tmp_path)
    done = run_dspark(*SEED, *pin, "--dry-run", "--commands", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    cells = re.findall(r"^# ---- cell \d+/21: (\S+) ", out, flags=re.M)
    assert len(cells) == 21 and cells[:3] == ["none-c256", "dspark_fixed-c256",
                                              "dspark_adaptive-c256"]
    assert cells[-1] == "dspark_adaptive-c4"
    assert out.count("vllm serve /models/DeepSeek-V4-Flash-DSpark") == 21
    assert out.count("vllm bench serve") == 63
    assert out.count('"enable_adaptive_verification":true') == 7
    assert out.count("export VLLM_USE_BREAKABLE_CUDAGRAPH=1") == 7
    assert out.count("--max-num-seqs 256") == 21
    # The report's phases: 64 @ 32 (256 tokens), 64 @ the cell (256), 880 @ the cell (2048).
    last = out[out.index("cell 21/21"):]
    assert re.findall(r"--num-prompts (\d+) \\\n  --max-concurrency (\d+)", last) == [
        ("64", "32"), ("64", "4"), ("880", "4")]
    assert re.findall(r"--speed-bench-output-len (\d+)", last) == ["256", "256", "2048"]
    assert "--temperature 1.0" in last and "--top-p 1.0" in last
    assert "--speed-bench-dataset-subset throughput_1k" in last
    assert "pinned sha256 " in out
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "release"]  # nothing written


def test_the_dry_run_plan_as_json(tmp_path: Path) -> None:
    pin = prepared(tmp_path)
    done = run_dspark(*SEED, *pin, "--dry-run", "--json", "bench.concurrency=64", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["protocol"]["concurrencies"] == [256, 128, 64, 32, 16, 8, 4]
    assert [c["id"] for c in plan["cells"]] == ["none-c64", "dspark_fixed-c64",
                                                "dspark_adaptive-c64"]
    adaptive = plan["cells"][2]
    assert adaptive["launch"]["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert [p["name"] for p in adaptive["phases"]] == ["warmup1", "warmup2", "measured"]
    measured = adaptive["phases"][2]["argv"]
    assert measured[:3] == ["vllm", "bench", "serve"]
    assert measured[measured.index("--max-concurrency") + 1] == "64"
    assert set(plan["preflight"]) == {"none", "dspark_fixed", "dspark_adaptive"}
    assert [(f["rule"], f["status"]) for f in plan["inputs"]] == [
        ("bench-request-set", "passed"), ("bench-lossless-prompts", "passed")]
    assert plan["summary"]["cells"] == plan["summary"]["cold_boots"] == 3
    assert plan["summary"]["requests"] == 3 * (64 + 64 + 880)
    assert plan["summary"]["estimate_assumes"] == {"boot_s": 600.0, "tokens_per_s": 40.0}


def test_repeats_plan_a_cold_boot_per_repeat(tmp_path: Path) -> None:
    pin = prepared(tmp_path)
    done = run_dspark(*SEED, *pin, "--dry-run", "--json", "bench.concurrency=4", "bench.repeats=2",
                      "bench.equivalence_margin=0.1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert (plan["protocol"]["repeats"], plan["protocol"]["equivalence_margin"]) == (2, 0.1)
    assert [(c["id"], c["repeat"]) for c in plan["cells"]] == [
        ("none-c4-r1", 1), ("dspark_fixed-c4-r1", 1), ("dspark_adaptive-c4-r1", 1),
        ("dspark_adaptive-c4-r2", 2), ("dspark_fixed-c4-r2", 2), ("none-c4-r2", 2)]
    results = [c["phases"][-1]["argv"] for c in plan["cells"]]
    dirs = {a[a.index("--result-dir") + 1] for a in results}
    assert len(dirs) == 6 and all(d.endswith(("-r1", "-r2")) for d in dirs)


@pytest.mark.parametrize(("overrides", "fragment"), [
    (("serving.args.max_num_seqs=128",), "runs up to 256 concurrent requests"),
    (("bench.baseline=ngram",), "bench.baseline 'ngram' is not one of"),
    (("bench.arm=ngram",), "bench.arm=ngram is not one of"),
    (("bench.concurrencies=[8,8]",), "lists 8 twice"),
    (("bench.measured_prompts=lots",), "bench.measured_prompts takes an integer, and 'lots'"),
    (("bench.repeats=two",), "bench.repeats takes an integer, and 'two' is not one"),
    # Each value's range is the schema's (config/bench.py), refused as it composes.
    (("bench.repeats=0",), "`bench.repeats=0` is out of range: allowed >= 1"),
    (("bench.measured_prompts=0",), "`bench.measured_prompts=0` is out of range: allowed >= 1"),
    (("bench.concurrencies=[8,0]",), "`bench.concurrencies` value 0 is out of range"),
    (("bench.equivalence_margin=1.5",),
     "`bench.equivalence_margin=1.5` is out of range: allowed a fraction in [0, 1)"),
    (("bench.equivalence_margin=-0.01",), "`bench.equivalence_margin=-0.01` is out of range"),
    (("bench.warmups=[{num_prompts:0,output_tokens:8}]",),
     "has num_prompts=0 out of range: allowed num_prompts, concurrency (or null) and "
     "output_tokens >= 1"),
    (("bench.sampling.max_output_tokens=0",), "`bench.sampling.max_output_tokens=0` is out of"),
    (("bench.lossless.min_identical=1.5",),
     "`bench.lossless.min_identical=1.5` is out of range: allowed >= 0 and <= 1"),
    (("bench.lossless.max_tokens=0",), "`bench.lossless.max_tokens=0` is out of range"),
    (("bench.objectives.ttft_ms=-1",),
     "`bench.objectives.ttft_ms=-1.0` is out of range: allowed > 0"),
    (("bench.objectives.percentile=0",),
     "`bench.objectives.percentile=0.0` is out of range: allowed > 0 and <= 100"),
    (("bench.dataset.sha256=abc",), "`bench.dataset.sha256=abc` is not a hex hash"),
    (("bench.prefix_caching=[]",), "bench.prefix_caching is empty"),
    (("bench.repeats=2", "bench.repeat=3"), "bench.repeat=3 is not one of the repeats 1..2"),
    (("bench.lossless.sha256=null",), "the greedy prompt file must be pinned"),
    (("bench.lossless.reference=ngram",), "bench.lossless.reference 'ngram' is not one of"),
])
def test_config_errors_exit_2_without_a_traceback(
        tmp_path: Path, overrides: tuple[str, ...], fragment: str) -> None:
    done = run_dspark(*SEED, *overrides, "--dry-run", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert fragment in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def speed_bench_dir(tmp_path: Path, content: str) -> tuple[Path, str]:
    directory = tmp_path / "sb"
    directory.mkdir()
    file = directory / "throughput_1k.jsonl"
    row = {"messages": [{"role": "user", "content": content}]}
    file.write_text("".join(json.dumps(row) + "\n" for _ in range(1000)))
    return directory, hashlib.sha256(file.read_bytes()).hexdigest()


def test_placeholder_prompts_are_refused_before_anything_starts(tmp_path: Path) -> None:
    directory, sha = speed_bench_dir(
        tmp_path, "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH")
    before = (directory / "throughput_1k.jsonl").read_bytes()
    done = run_dspark(*SEED, f"bench.dataset.path={directory}", f"bench.dataset.sha256={sha}",
                      f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "placeholder prompts" in done.stderr and "Traceback" not in done.stderr
    assert (directory / "throughput_1k.jsonl").read_bytes() == before
    assert not (tmp_path / "run" / "cells").exists()


def test_a_hash_mismatch_is_refused_before_anything_starts(tmp_path: Path) -> None:
    directory, sha = speed_bench_dir(tmp_path, "A real prompt.")
    done = run_dspark(*SEED, f"bench.dataset.path={directory}",
                      f"bench.dataset.sha256={'0' * 64}", f"hydra.run.dir={tmp_path / 'run'}",
                      cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"has SHA-256 {sha}" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "cells").exists()


def test_report_of_a_directory_without_cells_is_a_usage_error(tmp_path: Path) -> None:
    done = run_dspark("bench", "--report", str(tmp_path / "nothing"), cwd=tmp_path)
    assert done.returncode == 2 and "is not a directory" in done.stderr
    (tmp_path / "empty").mkdir()
    done = run_dspark("bench", "--report", str(tmp_path / "empty"), cwd=tmp_path)
    assert done.returncode == 2 and "No cell records" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


def test_the_plan_names_the_lossless_check(tmp_path: Path) -> None:
    done = run_dspark("bench", "bench=cpu", "+hw=cpu", "--dry-run", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lossless = json.loads(done.stdout)["protocol"]["lossless"]
    assert (lossless["reference"], lossless["min_identical"], lossless["max_tokens"]) == (
        "none", 1.0, 32)
    assert lossless["prompts"].endswith("data/greedy_prompts.jsonl")
    text = run_dspark("bench", "bench=cpu", "+hw=cpu", "--dry-run", cwd=tmp_path).stdout
    assert f"(sha256 {lossless['sha256']}) greedily, 32 tokens each" in text
    off = run_dspark("bench", "bench=cpu", "+hw=cpu", "--dry-run", "--json",
                     "bench.lossless.enabled=false", cwd=tmp_path)
    assert json.loads(off.stdout)["protocol"]["lossless"] is None
