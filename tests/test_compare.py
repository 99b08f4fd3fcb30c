"""`dspark compare RUN_A RUN_B` on records in the real format (tests/report_factory.py): what
changed, B/A per cell with the bench's verdicts, the CI gate's exit code, and records that do
not belong together refused."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import run_dspark
from tests.report_factory import ARMS, CONCURRENCIES, bench_run


def test_two_runs_of_one_protocol_pass_the_gate_and_name_what_changed(tmp_path: Path) -> None:
    a, b = bench_run(tmp_path / "a", seed=1), bench_run(tmp_path / "b", seed=2)
    cfg = b / "arms" / "dspark_adaptive" / "config.yaml"
    data = yaml.safe_load(cfg.read_text())
    data["serving"]["args"]["max_num_seqs"] = 512
    cfg.write_text(yaml.safe_dump(data))
    prov = b / "arms" / "none" / "provenance.json"
    p = json.loads(prov.read_text())
    p["runtime"]["vllm_commit"] = "f00dfeed"
    prov.write_text(json.dumps(p))
    done = run_dspark("compare", str(a), str(b), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["passed"] and out["slower"] == []
    changed = {c["key"]: (c["a"], c["b"]) for c in out["changes"]}
    assert changed["config.dspark_adaptive.serving.args.max_num_seqs"][1] == 512
    assert changed["runtime.none.vllm_commit"] == ("2a02f6efe", "f00dfeed")
    assert len(out["cells"]) == len(ARMS) * len(CONCURRENCIES)
    assert {c["verdict"] for c in out["cells"]} <= {"comparable", "inconclusive"}
    assert json.loads((b / "compare.json").read_text()) == out


def test_a_slower_run_fails_the_gate_with_exit_1(tmp_path: Path) -> None:
    a, b = bench_run(tmp_path / "a", seed=1), bench_run(tmp_path / "b", seed=2, scale=0.8)
    done = run_dspark("compare", str(a), str(b), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "gate: FAILED: slower: none c256 (output_throughput)" in done.stdout
    row = next(line for line in done.stdout.splitlines()
               if line.startswith("dspark_fixed") and " 64 " in line)
    assert "slower" in row and "0.8" in row


def test_runs_that_do_not_belong_together_are_refused(tmp_path: Path) -> None:
    a = bench_run(tmp_path / "a", seed=1)
    b = bench_run(tmp_path / "b", seed=2, protocol="other")
    done = run_dspark("compare", str(a), str(b), cwd=tmp_path)
    assert done.returncode == 2
    assert "do not belong together: different protocols" in done.stderr
    assert "Traceback" not in done.stderr
    done = run_dspark("compare", str(a), str(tmp_path / "missing"), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
