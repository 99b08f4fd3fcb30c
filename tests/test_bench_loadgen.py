"""The load generator's command lines (pure), checked against vLLM's own `bench serve` parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_cli.bench.dataset import DatasetSpec
from dspark_cli.bench.loadgen import (
    LoadGenerator,
    PhaseRun,
    latency_ms,
    phase_argv,
    result_filename,
    scalars,
)
from dspark_cli.bench.protocol import Phase, Sampling
from dspark_cli.config.choices import Platform
from dspark_cli.launch.layout import NodeLaunch, NodeLayout
from dspark_cli.launch.plan import LaunchPlan, Profile


def launch_plan(argv: tuple[str, ...], args: tuple[tuple[str, object], ...], served: str,
                port: int, base_url: str, model_path: str = "/m") -> LaunchPlan:
    """A plan of one node (the load generator reads its model, URL and options)."""
    command = NodeLaunch(0, True, argv, {}, port, args)
    return LaunchPlan(env=(), command=command,
                      layout=NodeLayout("single", 1, 0, (command,)), model_path=model_path,
                      served_model_name=served, host=None, port=port, base_url=base_url,
                      profile=Profile("cpu", Platform.cpu, 0, 1, (), None, 29550, 29501))


PLAN = launch_plan(("vllm", "serve", "/m"), (("served_model_name", "dsv4"),), "dsv4", 8123,
                   "http://127.0.0.1:8123")
SAMPLING = Sampling(temperature=1.0, top_p=1.0, max_output_tokens=2048, ignore_eos=False)
MEASURED = Phase("measured", 880, 4, 2048, True)
WARMUP = Phase("warmup1", 64, 32, 256, False)
DATASETS = {
    "speed_bench": DatasetSpec("speed_bench", Path("/d"), "throughput_1k", None, None, 7),
    "jsonl": DatasetSpec("jsonl", Path("/d/set.jsonl"), None, None, None, 7),
    "random": DatasetSpec("random", None, None, None, 32, 7),
}


def opt(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize(("kind", "expected"), [
    ("speed_bench", {"--dataset-name": "speed_bench", "--dataset-path": "/d",
                     "--speed-bench-dataset-subset": "throughput_1k",
                     "--speed-bench-output-len": "2048"}),
    ("jsonl", {"--dataset-name": "custom", "--dataset-path": "/d/set.jsonl",
               "--custom-output-len": "2048"}),
    ("random", {"--dataset-name": "random", "--random-input-len": "32",
                "--random-output-len": "2048"}),
])
def test_dataset_flags(kind: str, expected: dict[str, str]) -> None:
    argv = phase_argv(MEASURED, SAMPLING, DATASETS[kind], PLAN, Path("/r"))
    assert {flag: opt(argv, flag) for flag in expected} == expected


def test_phase_sizes_target_and_result_file() -> None:
    warm = Phase("warmup1", 64, 32, 256, False)
    argv = phase_argv(warm, SAMPLING, DATASETS["speed_bench"], PLAN, Path("/r/cells/x"))
    assert argv[:3] == ["vllm", "bench", "serve"]
    assert (opt(argv, "--num-prompts"), opt(argv, "--max-concurrency")) == ("64", "32")
    assert opt(argv, "--speed-bench-output-len") == "256"
    assert opt(argv, "--base-url") == "http://127.0.0.1:8123"
    assert (opt(argv, "--model"), opt(argv, "--served-model-name")) == ("/m", "dsv4")
    assert (opt(argv, "--temperature"), opt(argv, "--top-p"), opt(argv, "--seed")) == (
        "1.0", "1.0", "7")
    # No extra test request inside a phase: it would put tokens on the server's counters.
    assert opt(argv, "--ready-check-timeout-sec") == "0"
    assert "--save-result" in argv and opt(argv, "--result-dir") == "/r/cells/x"
    assert opt(argv, "--result-filename") == "warmup1.result.json"
    assert "--ignore-eos" not in argv and "--trust-remote-code" not in argv


def test_model_and_sampling_switches_follow_the_plan() -> None:
    plan = launch_plan((), (("tokenizer_mode", "deepseek_v4"), ("trust_remote_code", True)),
                       "/m", 8000, "http://h:8000")
    greedy = Sampling(temperature=0.0, top_p=1.0, max_output_tokens=32, ignore_eos=True)
    argv = phase_argv(MEASURED, greedy, DATASETS["random"], plan, Path("/r"))
    assert opt(argv, "--tokenizer-mode") == "deepseek_v4"
    assert "--trust-remote-code" in argv and "--ignore-eos" in argv
    assert opt(argv, "--temperature") == "0.0"


PARSE = """
import json, sys
from dspark_cli.vllm.shim import patch_version_lookup
patch_version_lookup()
from vllm.benchmarks.serve import add_cli_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
out = []
for argv in json.loads(sys.stdin.read()):
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    ns = parser.parse_args(argv[3:])
    out.append([ns.dataset_name, ns.num_prompts, ns.max_concurrency, ns.ready_check_timeout_sec])
print(json.dumps(out))
"""


@pytest.mark.vllm
def test_vllms_own_bench_parser_accepts_every_kind_of_phase() -> None:
    argvs = [phase_argv(MEASURED, SAMPLING, DATASETS[k], PLAN, Path("/r")) for k in DATASETS]
    done = subprocess.run([sys.executable, "-c", PARSE], input=json.dumps(argvs),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    assert parsed == [["speed_bench", 880, 4, 0], ["custom", 880, 4, 0], ["random", 880, 4, 0]]


# A stand-in load-generator process speaking the worker's protocol (loadgen_worker.py): ready,
# then per phase the argv's first word says what to do: `write PATH` a result, `exit N` fail,
# `hang` never answer, `tree PIDS` start a child, write both pids, never answer.
DOUBLE = """
import json, os, signal, subprocess, sys
answers = os.fdopen(os.dup(1), "w")
def say(v):
    answers.write(json.dumps(v) + "\\n"); answers.flush()
say({"ready": True, "pid": os.getpid(), "import_s": 0.5})
for line in sys.stdin:
    spec = json.loads(line)
    what, arg = spec["argv"][0], spec["argv"][1]
    with open(spec["log"], "a") as log:
        log.write(f"{what} {arg}\\n")
    if what == "write":
        json.dump({"completed": 3, "failed": 0, "ttfts": [1, 2, 3]}, open(arg, "w"))
        say({"returncode": 0})
    elif what == "exit":
        say({"returncode": int(arg)})
    elif what == "tree":
        child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
        open(arg, "w").write(f"{os.getpid()} {child.pid}")
        signal.pause()
    else:
        signal.pause()
"""


def double(tmp_path: Path) -> LoadGenerator:
    return LoadGenerator({}, tmp_path / "loadgen.log", (sys.executable, "-c", DOUBLE))


def phase(*words: str) -> list[str]:
    return ["vllm", "bench", "serve", *words]


def test_one_process_runs_phase_after_phase_and_reports_failures(tmp_path: Path) -> None:
    with double(tmp_path) as gen:
        ok = gen.run(phase("write", str(tmp_path / "measured.result.json")), MEASURED,
                     tmp_path, timeout_s=60)
        assert ok.error is None and ok.result is not None and ok.result["completed"] == 3
        assert scalars(ok.result) == {"completed": 3, "failed": 0}
        bad = gen.run(phase("exit", "4"), WARMUP, tmp_path, timeout_s=60)
        assert bad.result is None and "ended with 4" in (bad.error or "")
        assert "exit 4" in bad.log.read_text() and bad.log.name == "warmup1.log"
        assert gen.describe()["phases"] == 2 and gen.import_s == 0.5 and gen.usable
    assert not gen.usable and gen.proc.returncode == 0  # stdin closed: it ended by itself


def test_a_phase_stops_early_when_asked_and_later_phases_fail_at_once(tmp_path: Path) -> None:
    calls = iter([None, None, "the server exited with code -9"])
    with double(tmp_path) as gen:
        run: PhaseRun = gen.run(phase("hang", "-"), MEASURED, tmp_path, timeout_s=60,
                                abort=lambda: next(calls), poll_s=0.05)
        assert run.duration_s < 10 and run.returncode is None
        assert "stopped after" in (run.error or "") and "exited with code -9" in (run.error or "")
        later = gen.run(phase("write", str(tmp_path / "x")), WARMUP, tmp_path, timeout_s=60)
        assert later.result is None and "the load generator is gone" in (later.error or "")
        assert not (tmp_path / "x").exists()
    with double(tmp_path) as gen:
        slow = gen.run(phase("hang", "-"), MEASURED, tmp_path, timeout_s=0.5, poll_s=0.05)
        assert "timed out" in (slow.error or "") and not gen.usable


@pytest.mark.parametrize("stop", ["timeout", "stall"])
def test_a_stalled_phase_takes_down_the_process_with_what_it_started(
        tmp_path: Path, stop: str) -> None:
    import psutil

    pids = tmp_path / "pids"
    asked = {"timeout": {"timeout_s": 3.0},
             "stall": {"timeout_s": 60.0,
                       "abort": lambda: "stalled: no token for 30 s" if pids.exists() else None}}
    with double(tmp_path) as gen:
        run = gen.run(phase("tree", str(pids)), MEASURED, tmp_path, poll_s=0.05, **asked[stop])
    assert run.returncode is None and run.duration_s < 30
    assert ("timed out" if stop == "timeout" else "stalled: no token") in (run.error or "")
    worker, child = map(int, pids.read_text().split())
    assert worker != os.getpid()  # a process of its own, not this one
    gone = [not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE
            for p in (worker, child)]
    assert gone == [True, True]


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


# Request-level facts of a phase's result file: what must not depend on how it was run.
FACTS = ("num_prompts", "completed", "failed", "total_input_tokens", "total_output_tokens",
         "input_lens", "output_lens", "max_concurrency")


@pytest.mark.vllm
def test_phases_in_one_load_generator_are_separate_vllm_bench_serve_runs(
        tmp_path: Path) -> None:
    """The same phases (the measured one after a warmup in the same process) give the same
    requests as `vllm bench serve` run once per phase, against the fake vLLM."""
    from dspark_cli.deploy.start import ensure_model
    from dspark_cli.server.process import free_port
    from dspark_cli.vllm.shim import vllm_command
    from tests.conftest import compose_typed, wait_until
    from tests.doubles.fake_vllm import SCRIPT

    cfg = compose_typed(["+hw=cpu"])
    ensure_model(cfg)
    rows = tmp_path / "set.jsonl"  # prompts of many lengths, sampled in the seed's order
    rows.write_text("".join(json.dumps({"prompt": "word " * (3 + 7 * i % 40)}) + "\n"
                            for i in range(40)))
    port = free_port()
    plan = launch_plan((), (), "tiny", port, f"http://127.0.0.1:{port}",
                       model_path=str(cfg.model.path))
    greedy = Sampling(temperature=0.0, top_p=1.0, max_output_tokens=24, ignore_eos=True)
    dataset = DatasetSpec("jsonl", rows, None, None, None, 11)
    phases = [Phase("warmup1", 6, 2, 8, False), Phase("measured", 10, 3, 12, True)]
    server = subprocess.Popen([sys.executable, str(SCRIPT), "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _healthy(f"{plan.base_url}/health"), 30, "the fake server")
        apart, together = tmp_path / "apart", tmp_path / "together"
        apart.mkdir(), together.mkdir()
        # --save-detailed: the per-request lengths in the result file, both ways alike
        for p in phases:
            done = subprocess.run(vllm_command([*phase_argv(p, greedy, dataset, plan, apart),
                                                "--save-detailed"]),
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        with LoadGenerator({}, together / "loadgen.log") as gen:
            runs = [gen.run([*phase_argv(p, greedy, dataset, plan, together), "--save-detailed"],
                            p, together, 300) for p in phases]
            pid = gen.pid
    finally:
        server.kill()
        server.wait()
    assert [r.error for r in runs] == [None, None]
    for p, r in zip(phases, runs, strict=True):
        alone = json.loads((apart / result_filename(p)).read_text())
        assert r.result is not None and alone["num_prompts"] == p.num_prompts
        assert {k: r.result[k] for k in FACTS} == {k: alone[k] for k in FACTS}
        assert r.result["output_lens"] == [p.output_tokens] * p.num_prompts
        assert len(set(alone["input_lens"])) > 1  # the facts can tell two request sets apart
        assert "Namespace(" in r.log.read_text()  # vLLM's own output, in the phase's log
    assert pid != os.getpid()


def test_latency_percentiles_are_asked_for_and_read_back() -> None:
    argv = phase_argv(MEASURED, SAMPLING, DATASETS["random"], PLAN, Path("/r"))
    assert opt(argv, "--percentile-metrics") == "ttft,tpot,itl,e2el"
    assert opt(argv, "--metric-percentiles") == "50,90,99"
    result = {"p50_ttft_ms": 10.5, "p99_ttft_ms": 31, "median_ttft_ms": 10.5,
              "p50_itl_ms": 2.0, "p99_tpot_ms": "n/a", "ttfts": [0.01, 0.02]}
    assert latency_ms(result) == {"ttft": {"p50": 10.5, "p99": 31.0}, "itl": {"p50": 2.0}}
    assert latency_ms(None) == {}
