"""Issue 49 (and 46.6): what a probe of `dspark env`, the GPU sampler and `dspark prepare
speed-bench` found. GPU tools that print garbage, bytes that are no UTF-8, indexes that are not
plain digits, malformed JSON, huge or non-finite readings, or hang (real executable scripts on
PATH, as tests/fake_gpu.py makes them): bounded time, a clean exit, the sample marked
unreadable, strict JSON. Release files that prepare must not overwrite or cannot read: exit 2
naming the file and line. The pin prepare prints, pasted through a real shell, reads back the
exact folder."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dspark_cli.machine.gpu_sampler import GpuSampler, parse_rocm_smi
from tests.conftest import REPO, dspark_argv, dspark_env, run_dspark, run_dspark_process
from tests.test_image_facts import image_site
from tests.test_prepare_speed_bench import SEED_BENCH, release


def fake_tools(directory: Path, **scripts: str) -> dict[str, str]:
    """Each named tool (`nvidia_smi="..."` is `nvidia-smi`) as a real `sh` script in
    `directory`, first on PATH; an empty KFD topology unless the test makes one."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, body in scripts.items():
        path = directory / name.replace("_", "-")
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (directory / "kfd-nodes").mkdir(exist_ok=True)
    return {"PATH": f"{directory}{os.pathsep}{os.environ.get('PATH', '')}",
            "DSPARK_KFD_NODES": str(directory / "kfd-nodes")}


def printf(data: bytes) -> str:
    """A shell line printing exactly `data` (octal escapes: any byte, none interpreted)."""
    return "printf '" + "".join(f"\\{b:03o}" for b in data) + "'"


def strict_json(text: str) -> Any:
    """JSON as the standard has it: NaN or Infinity is an error, not a number."""
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr and done.returncode in (0, 1, 2), (
        done.returncode, done.stderr[-2000:])


# -- detection: `dspark env` -------------------------------------------------------------------
H200 = b"0, NVIDIA H200, 143771, 570.86.15, 9.0\n"


@pytest.mark.parametrize(("case", "answer"), [
    ("not UTF-8", b"0, NVIDIA H200 \xff\xfe, 143771, 570.86.15, 9.0\n"),
    ("an index of no plain digits", "\u00b2, NVIDIA H200, 143771, 570.86.15, 9.0\n".encode()),
    ("memory of 5000 digits", b"0, NVIDIA H200, " + b"9" * 5000 + b", 570.86.15, 9.0\n"),
    ("garbage", bytes(range(256)) * 4),
])
def test_nvidia_smi_answers_that_are_no_gpu_list_are_no_crash(
        tmp_path: Path, case: str, answer: bytes) -> None:
    host = fake_tools(tmp_path / "bin", nvidia_smi=printf(answer))
    done = run_dspark("env", "--json", env=host)
    no_traceback(done)
    env = json.loads(done.stdout)
    for gpu in env["machine"]["gpus"]:  # what was kept is plain data a terminal can show
        assert re.fullmatch(r"[^\x00-\x1f\x7f]*", gpu["name"]) and isinstance(gpu["index"], int)
    text = run_dspark("env", env=host)
    no_traceback(text)


def test_malformed_amd_smi_json_is_no_crash(tmp_path: Path) -> None:
    for answer in (b'{"gpu_data": 5}', b'[{"asic": "N/A"}]', b"[" * 100_000, b'"x"',
                   b'{"gpu_data": [{"asic": {"market_name": "MI350X\xff"}}]}'):
        host = fake_tools(tmp_path / "bin", amd_smi=printf(answer))
        node = tmp_path / "bin" / "kfd-nodes" / "1"
        node.mkdir(parents=True, exist_ok=True)
        (node / "properties").write_text("cpu_cores_count 0\ngfx_target_version 90500\n")
        done = run_dspark("env", "--json", env=host)
        no_traceback(done)
        gpus = json.loads(done.stdout)["machine"]["gpus"]
        assert [g["arch"] for g in gpus] == ["gfx950"], (answer[:40], gpus)


def test_a_hung_nvidia_smi_is_probed_once_within_its_bound(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    # a wrapper whose child holds the pipe: killing the script alone would not end the read
    host = fake_tools(tmp_path / "bin", nvidia_smi=f'echo "$*" >> {shlex.quote(str(calls))}\n'
                      "sleep 120")
    began = time.monotonic()
    done = run_dspark_process("env", "--json", env=host, timeout=60)
    took = time.monotonic() - began
    no_traceback(done)
    assert json.loads(done.stdout)["machine"]["platform"] == "cpu"
    assert len(calls.read_text().splitlines()) == 1, calls.read_text()
    assert took < 20, f"dspark env took {took:.1f} s"  # one 10 s probe, not three


def test_a_flood_of_gpu_lines_is_bounded(tmp_path: Path) -> None:
    host = fake_tools(tmp_path / "bin", nvidia_smi=(
        "awk 'BEGIN { for (i = 0; i < 300000; i++) "
        'printf "%d, NVIDIA H200, 143771, 570.86.15, 9.0\\n", i }\''))
    done = run_dspark("env", "--json", env=host)
    no_traceback(done)
    assert len(done.stdout) < 64 << 10, len(done.stdout)
    assert len(json.loads(done.stdout)["machine"]["gpus"]) <= 64


def test_a_vllm_commit_with_an_escape_and_a_newline_forges_no_line(tmp_path: Path) -> None:
    site = image_site(tmp_path)
    (site / "vllm" / "__init__.py").write_text("")
    forged = "2a02f6efe\x1b[2J\nA run here would refuse: nothing dspark can check"
    (site / "vllm-0.1.dev1+g2a02f6efe.dist-info" / "direct_url.json").write_text(json.dumps(
        {"url": "https://example.invalid/vllm", "vcs_info": {"vcs": "git",
                                                              "commit_id": forged}}))
    host = fake_tools(tmp_path / "bin")
    done = run_dspark_process("env", env={**host, "PYTHONPATH": str(site),
                                          "DSPARK_CACHE_DIR": str(tmp_path / "cache")})
    no_traceback(done)
    assert "\x1b" not in done.stdout
    vllm = [line for line in done.stdout.splitlines() if line.startswith("vLLM:")]
    assert len(vllm) == 1 and "\\x1b[2J\\x0aA run here" in vllm[0], done.stdout
    assert sum(line.startswith("A run here would refuse") for line in
               done.stdout.splitlines()) == 1, done.stdout


# -- the sampler ---------------------------------------------------------------------------------
# One sampling loop of a broken driver: a good line per GPU 0, then what the probe found.
GOOD = b"0, 90, 1000, 300, 1980, 60, 0x0\n"
BAD_LINES = [
    b"1, 95 \xff, 1000, 300, 1980, 60, 0x0\n",  # not UTF-8
    "\u00b2, 95, 1000, 300, 1980, 60, 0x0\n".encode(),  # an index of no plain digits
    b"0, 1e308, 1e308, 1e308, 1e308, 1e308, 0x0\n",  # huge: two of them sum to inf
    b"0, nan, inf, -inf, nan, nan, nan\n",  # non-finite, and a nan throttle mask
    b"0, 90, 1000, 300, 1980, 60, 0x" + b"f" * 400 + b"\n",  # a mask past any float
    b"x" * 20000 + b"\n",  # a line longer than any
]


def sampling_nvidia_smi(directory: Path) -> dict[str, str]:
    """nvidia-smi that lists GPU 0, and in its -lms loop prints GOOD and every BAD line, again
    and again, until it is stopped."""
    loop = GOOD + b"".join(BAD_LINES)
    return fake_tools(directory, nvidia_smi=(
        'case "$*" in *-lms*) ;; *) echo 0; exit 0;; esac\n'
        f"while true; do {printf(loop)}; sleep 0.05; done"))


def test_the_sampler_marks_unreadable_lines_and_writes_strict_finite_json(
        tmp_path: Path) -> None:
    env = sampling_nvidia_smi(tmp_path / "bin")
    out = tmp_path / "gpus.json"
    done = subprocess.run([sys.executable, "-m", "dspark_cli.machine.gpu_sampler", "--interval",
                           "0.05", "--duration", "1", "--out", str(out)], capture_output=True,
                          text=True, timeout=60, env=dspark_env(env), cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    doc = strict_json(out.read_text())
    strict_json(done.stdout)
    (gpu0,) = doc["measured"]
    assert gpu0["gpu"] == "0"
    # every reading the bad lines held is unreadable (None), so the means are GOOD's own
    assert gpu0["means"] == {"utilization_pct": 90.0, "memory_used_mib": 1000.0,
                             "power_w": 300.0, "sm_clock_mhz": 1980.0, "temperature_c": 60.0}
    assert gpu0["throttled_share"] == 0.0
    assert "unreadable" in doc["error"], doc["error"]


def test_the_reader_thread_lives_through_any_answer(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    died: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(args.exc_value))
    amd = [b'{"gpu_data": 5}', b"[" * 100_000, b"\xff\xfe", b'{"gpu": {"x": 1}}',
           b'[{"gpu": "0\\u001b[2J", "usage": {"gfx_activity": {"value": 1e308}},'
           b' "power": {"socket_power": 1e999, "throttle_status": "THROTTLED"}}]',
           b'[{"gpu": 0, "usage": {"gfx_activity": "1e308 %"}, "power": {"socket_power": '
           + b"9" * 400 + b"}}]"]
    rocm = [b'{"card0": {"GPU use (%)": "1e308"}}', b"[1, 2]", b"\xff"]
    for tool, answers in (("amd-smi", amd), ("rocm-smi", rocm)):
        for answer in answers:
            monkeypatch.setenv("PATH", fake_tools(tmp_path / "bin" / tool,
                                                  **{tool: printf(answer)})["PATH"])
            sampler = GpuSampler(0.05, tool).start()
            time.sleep(0.3)
            alive = any(t.name == "dspark-gpu-sampler" and t.is_alive()
                        for t in threading.enumerate())
            samples = sampler.stop()
            assert alive and not died, (tool, answer[:40], died)
            assert all(v is None or abs(v) < 1e16 for s in samples for v in s.values)
            assert all(s.gpu.isdigit() for s in samples), samples
            assert samples or "unreadable" in (sampler.problem or ""), (tool, answer[:40])


def test_rocm_smi_1e308_is_no_1308_percent() -> None:
    ((card, values),) = parse_rocm_smi('{"card0": {"GPU use (%)": "1e308", '
                                       '"Temperature (Sensor edge) (C)": "45.0"}}')
    assert card == "0" and values[0] is None and values[4] == 45.0


# -- prepare: what it must not overwrite -----------------------------------------------------
def test_prepare_never_replaces_a_release_file_it_reads(tmp_path: Path) -> None:
    sets = tmp_path / "data" / "speed_bench"
    release(sets, 5)
    original = (sets / "throughput_1k.jsonl").read_bytes()
    for args in (["data/speed_bench"], ["data/speed_bench", "--out", "data/speed_bench"],
                 ["data/speed_bench/throughput_1k.jsonl"],
                 ["data/speed_bench/throughput_1k.jsonl", "--out", str(sets)]):
        done = run_dspark("prepare", "speed-bench", *args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert "which it is made from: refused" in done.stderr and not done.stdout, done.stderr
        assert (sets / "throughput_1k.jsonl").read_bytes() == original
    # a link at the output's name that leads to the release file is the release file
    other = tmp_path / "out"
    other.mkdir()
    (other / "throughput_1k.jsonl").symlink_to(sets / "throughput_1k.jsonl")
    done = run_dspark("prepare", "speed-bench", str(sets), "--out", str(other), cwd=tmp_path)
    assert done.returncode == 2 and "refused" in done.stderr, done.stderr
    assert (sets / "throughput_1k.jsonl").read_bytes() == original


def test_prepare_writes_no_file_through_a_planted_link(tmp_path: Path) -> None:
    source = release(tmp_path / "rel", 5)
    out = tmp_path / "sets"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (out / "throughput_1k.jsonl").symlink_to(victim)
    done = run_dspark("prepare", "speed-bench", str(source), "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "keep me\n"
    assert not (out / "throughput_1k.jsonl").is_symlink()


def test_prepare_refuses_an_out_that_is_a_file_or_a_dangling_link(tmp_path: Path) -> None:
    source = release(tmp_path / "rel", 5)
    (tmp_path / "a-file").write_text("mine\n")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for out, says in (("a-file", "is a file, not a directory"),
                      ("dangling", "is a link to nowhere")):
        done = run_dspark("prepare", "speed-bench", str(source), "--out", str(tmp_path / out),
                          cwd=tmp_path)
        assert done.returncode == 2, (out, done.stderr)
        assert f"{tmp_path / out} {says}" in done.stderr, done.stderr
    assert (tmp_path / "a-file").read_text() == "mine\n"
    assert not (tmp_path / "nowhere").exists()


# -- prepare: sources it cannot take -----------------------------------------------------------
ROW = b'{"turns": ["Question: what is 2+2?"], "question_id": "q"}\n'


def _source(tmp_path: Path, case: str) -> tuple[Path, str]:
    """A release directory holding the case's throughput_1k file; what the error must say."""
    rel = tmp_path / "rel"
    rel.mkdir()
    path = rel / "throughput_1k.jsonl"
    if case == "empty":
        path.write_bytes(b"")
        return rel, f"{path} holds no row"
    if case == "not UTF-8":
        path.write_bytes(ROW + b'{"turns": ["caf\xe9"]}\n')
        return rel, f"{path} line 2 is not UTF-8"
    if case == "placeholder":
        from dspark_cli.bench.dataset import SPEED_BENCH_SENTINEL

        path.write_bytes(ROW + json.dumps({"turns": [SPEED_BENCH_SENTINEL]}).encode() + b"\n")
        return rel, f"first: {path} line 2"
    if case == "a 50 MB line":
        with path.open("wb") as f:
            f.write(ROW + b'{"turns": ["' + b"a" * (50 << 20) + b'"]}\n')
        return rel, f"{path} line 2 is longer than"
    if case == "a FIFO":
        os.mkfifo(path)
        return rel, f"{path} is not a regular file"
    if case == "a link out of the source":
        (tmp_path / "elsewhere.jsonl").write_bytes(ROW)
        path.symlink_to(tmp_path / "elsewhere.jsonl")
        return rel, f"{path} is a link out of {rel}"
    if case == "corrupt Parquet":
        (rel / "throughput_1k").mkdir()
        bad = rel / "throughput_1k" / "part-0.parquet"
        bad.write_bytes(b"PAR1" + b"\x00" * 100)  # truncated: no footer
        return rel, f"{bad} is not Parquet"
    if case == "a lone surrogate":
        path.write_bytes(ROW + b'{"turns": ["half \\ud800 a pair"]}\n')
        return rel, f"{path} line 2 holds a lone surrogate"
    if case == "deep nesting":
        path.write_bytes(ROW + b'{"turns": ["x"], "x": ' + b"[" * 100_000 + b"]" * 100_000
                         + b"}\n")
        return rel, f"{path} line 2 nests deeper"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["empty", "not UTF-8", "placeholder", "a 50 MB line",
                                  "a FIFO", "a link out of the source", "corrupt Parquet",
                                  "a lone surrogate", "deep nesting"])
def test_a_source_prepare_cannot_take_is_exit_2_naming_file_and_line(
        tmp_path: Path, case: str) -> None:
    source, says = _source(tmp_path, case)
    done = run_dspark_process("prepare", "speed-bench", str(source), cwd=tmp_path, timeout=60)
    assert done.returncode == 2, (case, done.returncode, done.stderr[-2000:])
    assert says in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) <= 2, done.stderr
    assert not done.stdout and not (tmp_path / "data").exists()


def test_a_set_of_one_prompt_copied_is_pinned_with_a_warning(tmp_path: Path) -> None:
    rel = tmp_path / "rel"
    rel.mkdir()
    (rel / "throughput_1k.jsonl").write_bytes(ROW * 1000)
    done = run_dspark("prepare", "speed-bench", str(rel), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "warning: 999 of 1000 requests repeat an earlier request's prompt" in done.stderr
    assert f"(first: {rel / 'throughput_1k.jsonl'} line 2 repeats" in done.stderr
    done = run_dspark("prepare", "speed-bench", str(rel), "--json", cwd=tmp_path)
    assert json.loads(done.stdout)["repeated"] == 999


# -- the pin, pasted --------------------------------------------------------------------------
NAMES = ["it's", "x,y", "p(1)", "q[1]", "e${oc.env:HOME}", "a b"]


def test_the_printed_pin_pasted_into_a_shell_reads_exactly_that_folder(tmp_path: Path) -> None:
    source = release(tmp_path / "rel", 900)
    lines = ["set -e"]
    for i, name in enumerate(NAMES):
        out = tmp_path / "sets" / name
        done = run_dspark("prepare", "speed-bench", str(source), "--out", str(out),
                          cwd=tmp_path)
        assert done.returncode == 0, (name, done.stderr)
        sha = hashlib.sha256((out / "throughput_1k.jsonl").read_bytes()).hexdigest()
        # the stdout as a person pastes it after the command: through the shell's own parser
        argv = " ".join(shlex.quote(a) for a in dspark_argv(*SEED_BENCH, "--dry-run"))
        lines.append(f"{argv} {done.stdout.strip()} > {tmp_path}/dry-{i}.txt 2>&1 || "
                     f"echo exit $? >> {tmp_path}/dry-{i}.txt")
        lines.append(f"echo {sha} > {tmp_path}/sha-{i}.txt")
    done = subprocess.run(["bash", "-c", "\n".join(lines)], capture_output=True, text=True,
                          timeout=300, env=dspark_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for i, name in enumerate(NAMES):
        dry = (tmp_path / f"dry-{i}.txt").read_text()
        sha = (tmp_path / f"sha-{i}.txt").read_text().strip()
        assert "exit " not in dry and f"(pinned sha256 {sha})" in dry, (name, dry[-6000:])


def test_the_readmes_pin_survives_a_folder_with_a_space(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    assign = next(line for line in readme.splitlines() if "PIN=" in line
                  and "prepare speed-bench" in line)
    use = next(line for line in readme.splitlines() if "PIN" in line
               and line.startswith("dspark bench") and "--dry-run" in line)
    source = release(tmp_path / "rel", 900)
    out = tmp_path / "my sets"
    assign = assign.replace("/data/speed-bench-release",
                            f"{shlex.quote(str(source))} --out {shlex.quote(str(out))}")
    dspark = " ".join(shlex.quote(a) for a in dspark_argv())
    script = f'dspark() {{ {dspark} "$@"; }}\n{assign}\n{use}\n'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          timeout=120, env=dspark_env(), cwd=tmp_path)
    sha = hashlib.sha256((out / "throughput_1k.jsonl").read_bytes()).hexdigest()
    assert done.returncode == 0, (script, done.stderr[-3000:])
    assert f"(pinned sha256 {sha})" in done.stdout
