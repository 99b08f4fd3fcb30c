"""One launch: what `dspark smoke` and every `dspark bench` arm boot is what `dspark serve`
boots for the same config, the port and run paths aside. Dry-run plans of the real CLI (serve,
bench) and the smoke's planning step (`checked_plan` of the smoke's config), compared argv for
argv and variable for variable: nothing (such as `--per-request-spec-decode-metrics`) is added
to the measured launch."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dspark_cli.config import smoke as smoke_schema
from dspark_cli.launch.plan import build_plan
from dspark_cli.launch.rules import checked_plan
from tests.conftest import compose_typed, run_dspark

ARMS = ("none", "draft_model", "ngram")
BASE = ("+hw=cpu",)


def comparable(argv: Sequence[str], env: dict[str, str], run_dir: Path | None) -> dict[str, Any]:
    """The launch without what differs by design: the port and paths under the run
    directory."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--port":
            skip = True
            continue
        if run_dir is not None and str(run_dir) in a:
            continue
        out.append(a)
    return {"argv": out, "env": {k: v for k, v in env.items()
                                 if run_dir is None or str(run_dir) not in v}}


def serve_launch(arm: str, cwd: Path) -> dict[str, Any]:
    done = run_dspark("serve", *BASE, f"speculative={arm}", "--dry-run", "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)
    return comparable(plan["argv"], plan["env"], None)


def test_smoke_and_every_bench_arm_boot_what_serve_boots(tmp_path: Path) -> None:
    served = {arm: serve_launch(arm, tmp_path) for arm in ARMS}
    assert "--speculative-config" in served["draft_model"]["argv"]
    run = tmp_path / "bench"
    done = run_dspark("bench", "bench=cpu", *BASE, f"bench.arms=[{','.join(ARMS)}]",
                      f"hydra.run.dir={run}", "--dry-run", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    cells = json.loads(done.stdout)["cells"]
    assert {c["arm"] for c in cells} == set(ARMS) and len(cells) == len(ARMS) * 2
    for cell in cells:
        launch = cell["launch"]
        assert comparable(launch["argv"], launch["env"], run) == served[cell["arm"]], cell["id"]
    smoke_schema.register()
    for arm in ARMS:
        overrides = [*BASE, f"speculative={arm}"]
        smoke = checked_plan(compose_typed(overrides, config="smoke"))  # what smoke_in boots
        serve = build_plan(compose_typed(overrides, config="serve"))
        assert smoke.argv == serve.argv and dict(smoke.env) == dict(serve.env), arm
        assert comparable(smoke.argv, dict(smoke.env), None)["argv"] == served[arm]["argv"]


@pytest.mark.parametrize("key", ["smoke.spec_metrics", "bench.spec_metrics"])
def test_no_setting_adds_a_flag_to_the_measured_launch(tmp_path: Path, key: str) -> None:
    """The settings that used to add `--per-request-spec-decode-metrics` to smoke and bench
    launches only are gone: a launch flag is the config's (`serving.extra_args`), serve's too."""
    command = key.split(".")[0]
    # (a smoke composed anyway would only attach to nothing, and fail with 3, not 2)
    args = (("bench=cpu", "--dry-run") if command == "bench" else
            ("server.url=http://127.0.0.1:1", "server.attach_refused_s=0.5"))
    done = run_dspark(command, *BASE, f"{key}=detailed", *args, cwd=tmp_path)
    assert done.returncode == 2 and "spec_metrics" in done.stderr, done.stderr[-2000:]


def test_a_prefix_caching_off_cell_boots_what_serve_boots_with_that_override(
        tmp_path: Path) -> None:
    """`bench.prefix_caching=[on,off]`: each arm's second launch is exactly `dspark serve
    speculative=<arm> serving.args.enable_prefix_caching=false`, and the dry run counts it."""
    off = ("serving.args.enable_prefix_caching=false",)
    done = run_dspark("serve", *BASE, "speculative=draft_model", *off, "--dry-run", "--json",
                      cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    served_off = comparable(json.loads(done.stdout)["argv"], json.loads(done.stdout)["env"],
                            None)
    assert "--no-enable-prefix-caching" in served_off["argv"]
    served_on = serve_launch("draft_model", tmp_path)
    run = tmp_path / "bench"
    axis = ("bench=cpu", *BASE, "bench.arms=[none,draft_model]", "bench.prefix_caching=[on,off]",
            f"hydra.run.dir={run}", "--dry-run")
    done = run_dspark("bench", *axis, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)
    assert plan["summary"]["cold_boots"] == plan["summary"]["cells"] == 8
    assert plan["summary"]["launches"] == 4 and plan["protocol"]["prefix_caching"] == ["on", "off"]
    mine = {(c["arm"], c["prefix_caching"]): c for c in plan["cells"] if c["concurrency"] == 8}
    assert mine[("draft_model", False)]["id"] == "draft_model+pc-off-c8"
    assert comparable(mine[("draft_model", False)]["launch"]["argv"],
                      mine[("draft_model", False)]["launch"]["env"], run) == served_off
    assert comparable(mine[("draft_model", True)]["launch"]["argv"],
                      mine[("draft_model", True)]["launch"]["env"], run) == served_on
    text = run_dspark("bench", *axis, cwd=tmp_path)
    assert text.returncode == 0, text.stderr[-2000:]
    assert "# prefix caching: on, off for every arm (4 launches" in text.stdout
    assert "# cells: 8, each on its own cold server (8 cold boots)" in text.stdout
    assert "cell draft_model+pc-off-c2:" in text.stdout
    # "on" cells that would run with it off too are refused, nothing planned
    both = run_dspark("bench", *axis, *off, cwd=tmp_path)
    assert both.returncode == 2 and "bench.prefix_caching lists on" in both.stderr, both.stderr


def test_a_bench_refuses_a_key_that_reads_the_arms_group(tmp_path: Path) -> None:
    """Interpolations resolve once, at the command edge: a key outside `speculative` reading
    `speculative.*` would hold the composed profile's value in every arm."""
    done = run_dspark("bench", "+hw=cpu", "--dry-run", "server.command=[fake,${speculative.name}]",
                      cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "`server.command[1]` read `speculative.*`" in done.stderr
    assert "Traceback" not in done.stderr and not any(tmp_path.iterdir())
