"""Dry runs show what will run: `validate --dry-run` plans the smoke where `deploy.target` runs
it (its node layout, the target's own checks), picks the bench protocol of the hw profile and
speaks JSON with --json; `bench --dry-run deploy=k8s` checks the image; `bench --report`
refuses overrides it would ignore; hints name the key to change."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_dspark
from tests.test_prepare_speed_bench import prepared

TINY_TWO_NODES = ("+hw=cpu", "hw.nodes=2", "hw.args.data_parallel_size=1")


def test_validate_dry_run_plans_every_node_of_the_layout() -> None:
    done = run_dspark("validate", *TINY_TWO_NODES, "validate.bench=null", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "# node 0 of 2" in done.stdout and "# node 1 of 2" in done.stdout
    assert "--headless" in done.stdout


def test_validate_dry_run_refuses_a_layout_the_smoke_would_refuse() -> None:
    done = run_dspark("validate", *TINY_TWO_NODES, "hw.layout=dp_hybrid", "validate.bench=null",
                      "--dry-run")
    assert done.returncode == 2, done.stderr
    assert "layout-hybrid-local-dp" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_validate_dry_run_runs_the_targets_own_checks() -> None:
    done = run_dspark("validate", "+hw=mi350x", "deploy=k8s", "validate.bench=null",
                      "--dry-run")
    assert done.returncode == 1, done.stderr
    assert "k8s-image-pinned FAILED" in done.stderr and "(change `deploy.k8s.image`)" in done.stderr
    assert "kind: Deployment" in done.stdout  # the smoke's launch is the manifests


def test_validate_dry_run_on_a_gpu_profile_plans_the_seed_protocol(tmp_path: Path) -> None:
    missing = run_dspark("validate", "+hw=mi350x", "--dry-run", cwd=tmp_path)
    assert missing.returncode == 1 and "bench-request-set FAILED" in missing.stderr
    done = run_dspark("validate", "+hw=mi350x", *prepared(tmp_path), "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "4. bench: protocol speed_bench_throughput_1k" in done.stdout
    assert "FAILED" not in done.stderr
    cpu = run_dspark("validate", "+hw=cpu", "--dry-run")
    assert cpu.returncode == 0 and "4. bench: protocol cpu" in cpu.stdout, cpu.stderr


def test_validate_dry_run_json_is_json() -> None:
    done = run_dspark("validate", "+hw=cpu", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [s["name"] for s in doc["stages"]] == ["checkpoint", "tests", "smoke", "bench",
                                                  "accuracy", "report"]
    smoke, bench = doc["stages"][2], doc["stages"][3]
    assert smoke["launch"]["argv"][:2] == ["vllm", "serve"]
    assert {f["rule"] for f in smoke["launch"]["preflight"]} >= {"parallel-fits-profile"}
    assert bench["run"] is True and bench["plan"]["protocol"]["name"] == "cpu"


def test_bench_dry_run_on_k8s_checks_the_image() -> None:
    done = run_dspark("bench", "+hw=mi350x", "bench=speed_bench_throughput_1k", "deploy=k8s",
                      "--dry-run", "--commands")
    assert done.returncode == 1, done.stderr
    assert "k8s-image-pinned FAILED" in done.stderr
    assert "# launch: a cold Kubernetes deployment for this cell" in done.stdout


def test_bench_report_refuses_overrides_it_would_ignore(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    done = run_dspark("bench", "--report", str(runs), "bench.concurrency=4", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "takes no overrides" in done.stderr and "bench.concurrency=4" in done.stderr
    assert list(runs.iterdir()) == []


def test_an_eager_layout_names_the_compilation_key() -> None:
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "compilation=eager", "--dry-run")
    assert done.returncode == 2, done.stderr
    assert "layout-adaptive-every-node" in done.stderr and "--enforce-eager" in done.stderr
    assert "(change `compilation.enforce_eager`)" in done.stderr
    assert "pipeline_parallel_size`" not in done.stderr


def test_a_typo_without_plus_gets_did_you_mean() -> None:
    for command in (("serve", "--dry-run"), ("smoke",)):
        done = run_dspark(*command, "+hw=cpu", "serving.extra_argz.enable_chunked_prefill=true")
        assert done.returncode == 2, done.stderr
        assert "did you mean `serving.extra_args`?" in done.stderr, done.stderr
        assert "To append" not in done.stderr and "Traceback" not in done.stderr
