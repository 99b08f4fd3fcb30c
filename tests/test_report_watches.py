"""The report's watches section (`report/evidence.py`): per-position acceptance per arm and
concurrency with its request set (a warning for random tokens), flagged, stalled and fallen-back
cells, the cold start per arm, the GPUs under load; hostile text inert, a planted wrong type
refused. Over a bench run's records as `dspark bench` writes them (tests/report_factory.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import run_dspark
from tests.report_factory import bench_run

RANDOM = {"name": "random (32 input tokens, seed 0)", "kind": "random", "sha256": None,
          "rows": None, "chat_templated": False, "random_tokens": True, "sentence": "random"}
COLD = {"phases_s": {"engine_started": 20.0, "weights_loaded": 300.0, "graphs_captured": 95.0,
                     "engine_ready": 30.0, "api_ready": 3.0},
        "total_s": 448.0, "boot_s": 470.0, "before_first_line_s": 22.0, "markers": {}}


def gpus(util: float, flags: list[str]) -> dict[str, Any]:
    means = {"utilization_pct": util, "memory_used_mib": 120000.0, "power_w": 600.0,
             "sm_clock_mhz": 1980.0, "temperature_c": 60.0}
    return {"tool": "nvidia-smi", "measured": [{"gpu": str(i), "samples": 10, "means": means}
                                              for i in range(8)], "flags": flags}


def edit_cells(root: Path, edit: Any) -> None:
    for path in sorted((root / "cells").glob("*/cell.json")):
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))


def test_the_report_shows_the_watches(tmp_path: Path) -> None:
    root = bench_run(tmp_path / "bench", repeats=1)

    def edit(data: dict[str, Any]) -> None:
        speculates = data["arm"] != "none"
        data["request_set"] = RANDOM
        data["cold_start"] = COLD
        data["per_position_acceptance"] = [0.8, 0.6, 0.4] if speculates else None
        data["acceptance_check"] = ({"rate": 0.0 if data["arm"] == "dspark_fixed" else 0.5,
                                     "flagged": data["arm"] == "dspark_fixed",
                                     "sentence": "acceptance rate 0.0000 is at or below"}
                                    if speculates else None)
        data["gpus"] = gpus(90.0, ["GPU 3 sat idle <b>x</b>"] if data["concurrency"] == 4
                            else [])
        if data["cell_id"] == "dspark_adaptive-c8":
            data["stall"] = {"reason": "stalled", "sentence": "stalled: no token for 90 s"}
            data["fallbacks"] = ["model_runner_v1: using the V1 model runner instead"]

    edit_cells(root, edit)
    out = tmp_path / "report"
    done = run_dspark("report", str(root), "--out", str(out))
    assert done.returncode == 0, done.stderr
    md = (out / "report.md").read_text()
    section = md[md.index("### Watches"):]
    assert "| dspark_adaptive | 4 | 0.800 / 0.600 / 0.400 | 0.500 | random (32 input" in section
    assert "**Warning:** the request set is random token ids" in section
    assert "**Flagged** dspark_fixed-c4: acceptance rate 0.0000" in section
    assert "**Stalled** dspark_adaptive-c8: stalled: no token for 90 s" in section
    assert "Fallback in dspark_adaptive-c8: model_runner_v1: using the V1" in section
    assert "| none | " in section and "| 22.0 | 20.0 | 300.0 | 95.0 | 30.0 | 3.0 | 470.0 |" in (
        section)
    assert "| none-c4 | nvidia-smi | 8 | 90.0 | 90.0 | 600.0 | 1,980 |" in section
    assert "GPU 3 sat idle &lt;b&gt;x&lt;/b&gt;" in section and "<b>" not in section


def test_a_planted_wrong_type_is_refused(tmp_path: Path) -> None:
    root = bench_run(tmp_path / "bench", repeats=1)
    edit_cells(root, lambda data: data.update(gpus={"tool": "nvidia-smi", "flags": "idle"}))
    done = run_dspark("report", str(root), "--out", str(tmp_path / "report"))
    assert done.returncode == 2, done.stderr
    assert "gpus.flags" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "report").exists()
