"""`dspark bench --dry-run` lists the watches every cell will run, on or off, with the key that
changes each (text and --json), the GPU sampler's tool as found on this host's PATH."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_dspark
from tests.fake_gpu import fake_sampling_host


def test_the_dry_run_lists_the_watches(tmp_path: Path) -> None:
    done = run_dspark("bench", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("# watch ")]
    assert [line.split(":")[0] for line in lines] == [
        "# watch stall", "# watch fallbacks", "# watch degraded", "# watch acceptance",
        "# watch cold_start", "# watch gpus"]
    assert "no token generated for 90 s" in lines[0] and "watch.stall_s=0" in lines[0]
    assert "model_runner_v1, adaptive_refused" in lines[1]
    assert lines[5].startswith("# watch gpus: OFF: no nvidia-smi")  # this host has none


def test_the_json_dry_run_follows_the_settings(tmp_path: Path) -> None:
    env = fake_sampling_host(tmp_path / "bin", "h200x8", "--detect-as", "no-gpu")
    done = run_dspark("bench", "--dry-run", "--json", "+hw=cpu", "watch.stall_s=0",
                      "watch.gpu_interval_s=0.5", "watch.min_acceptance=null", env=env,
                      cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    watches = {w["name"]: w for w in json.loads(done.stdout)["watches"]}
    assert watches["stall"] == {"name": "stall", "on": False, "what": "watch.stall_s is 0"}
    assert watches["acceptance"]["on"] is False
    assert watches["gpus"]["on"] is True and "every 0.5 s through nvidia-smi" in (
        watches["gpus"]["what"])
