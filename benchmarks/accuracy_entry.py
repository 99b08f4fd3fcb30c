"""What one arm's accuracy eval costs: lm_eval's CLI (`python -m lm_eval`, which indexes every
task lm_eval ships before it runs one) against dspark's entry (accuracy/lm_eval_entry.py, the
same `simple_evaluate` on the task directory alone), in the same run, on the same server.

    .venv/bin/python benchmarks/accuracy_entry.py [--rounds 3] [--limit 4]

The server is tests/doubles/fake_vllm.py (real HTTP, answers in milliseconds), so the figure is
lm_eval's own cost. Each round runs both ways, alternating which goes first; the figure is the
child's CPU time (user + system) and its wall time. Both ways must write the same score and the
same per-document results, or the script fails.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dspark_cli.accuracy.plan import (  # noqa: E402
    OFFLINE_ENV,
    TASK,
    accuracy_spec,
    eval_argv,
    task_yaml,
)
from dspark_cli.server.probe import healthy  # noqa: E402
from dspark_cli.server.process import free_port  # noqa: E402

EVAL_PYTHON = REPO / ".venv-eval" / "bin" / "python"
SHA = "0" * 64  # the dataset is read by lm_eval only: not verified here


def cli_argv(entry: list[str]) -> list[str]:
    """The same eval through lm_eval's CLI: the entry's arguments after `-m lm_eval`."""
    return [entry[0], "-m", "lm_eval", "--model", "local-completions", *entry[4:],
            "--log_samples"]


def run(argv: list[str], env: dict[str, str], out: Path) -> tuple[float, float, dict]:
    """CPU and wall seconds of one eval, and what it scored (score and per-document results)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    wall, after = time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{argv[1:4]} exited {done.returncode}:\n{done.stderr[-3000:]}")
    (results,) = out.rglob("results_*.json")
    (samples,) = out.rglob(f"samples_{TASK}_*.jsonl")
    scored = {"score": json.loads(results.read_text())["results"][TASK],
              "documents": sorted((r["doc_id"], r["filter"], r["exact_match"], r["resps"])
                                  for r in map(json.loads, samples.read_text().splitlines()))}
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, scored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, default=4)
    args = parser.parse_args()
    if not EVAL_PYTHON.is_file():
        sys.exit(f"no {EVAL_PYTHON}: run `make setup` first")
    spec = accuracy_spec({"dataset": "data/gsm8k_sample.jsonl", "sha256": SHA,
                          "limit": args.limit, "num_fewshot": 0, "max_gen_toks": 16,
                          "temperature": 0.0, "num_concurrent": 1, "margin": 0.02,
                          "python": str(EVAL_PYTHON)}, sys.executable, ["none"])
    assert spec is not None
    port = free_port()
    server = subprocess.Popen([sys.executable, str(REPO / "tests/doubles/fake_vllm.py"),
                               "--port", str(port)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not healthy(httpx.Client(), f"http://127.0.0.1:{port}"):
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit("the fake server did not come up")
            time.sleep(0.1)
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            task = root / "task"
            task.mkdir()
            (task / f"{TASK}.jsonl").write_bytes(spec.dataset.read_bytes())
            (task / f"{TASK}.yaml").write_text(task_yaml(spec, task / f"{TASK}.jsonl"))
            env = {**os.environ, **OFFLINE_ENV, "HF_DATASETS_CACHE": str(root / "hf")}
            ways = {"lm_eval CLI": cli_argv, "dspark entry": lambda argv: argv}
            cpu: dict[str, list[float]] = {w: [] for w in ways}
            wall: dict[str, list[float]] = {w: [] for w in ways}
            for r in range(args.rounds):
                scores = {}
                for way in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                    out = root / f"out-{r}-{way.replace(' ', '-')}"
                    argv = ways[way](eval_argv(spec, task, "tiny", f"http://127.0.0.1:{port}",
                                               out))
                    c, w, scores[way] = run(argv, env, out)
                    cpu[way].append(c)
                    wall[way].append(w)
                if len({json.dumps(s, sort_keys=True) for s in scores.values()}) != 1:
                    sys.exit(f"the two ways scored differently: {scores}")
                print(f"round {r + 1}: " + ", ".join(
                    f"{w} {cpu[w][-1]:.2f} s CPU ({wall[w][-1]:.1f} s wall)" for w in ways))
    finally:
        server.terminate()
        server.wait()
    med = {w: (statistics.median(cpu[w]), statistics.median(wall[w])) for w in ways}
    (cli_cpu, cli_wall), (entry_cpu, entry_wall) = med["lm_eval CLI"], med["dspark entry"]
    print(f"median per eval: lm_eval CLI {cli_cpu:.2f} s CPU, {cli_wall:.1f} s wall; dspark entry "
          f"{entry_cpu:.2f} s CPU, {entry_wall:.1f} s wall ({entry_cpu / cli_cpu - 1:+.0%} CPU); "
          "same score and per-document results each round")


if __name__ == "__main__":
    main()
