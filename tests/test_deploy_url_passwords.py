"""A password inside a URL never reaches a Slurm job script or Kubernetes manifests: refused
before anything is printed or written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_dspark

PLANTED = "planted-url-password"
IMAGE = "deploy.k8s.image=registry.example/vllm@sha256:" + "a" * 64


@pytest.mark.parametrize("target", ["slurm", "k8s"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "write"])
def test_a_url_password_in_a_nodes_command_is_refused(tmp_path: Path, target: str,
                                                       dry_run: bool) -> None:
    run = tmp_path / "run"
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", f"deploy={target}", IMAGE,
                      f"+serving.extra_args.tokenizer=https://me:{PLANTED}@hub.example/tok",
                      f"hydra.run.dir={run}", *(["--dry-run"] if dry_run else []),
                      cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "holds a password inside a URL" in done.stderr
    assert "Traceback" not in done.stderr
    assert PLANTED not in done.stdout + done.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in written if PLANTED in p.read_text(errors="replace")]
    assert not (run / "manifests.yaml").exists() and not (run / "job.sbatch").exists()
