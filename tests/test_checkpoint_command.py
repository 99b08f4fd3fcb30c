"""`dspark verify-checkpoint` as a user runs it: a real subprocess, real files, documented exit
codes (0 passed, 1 a check failed, 2 usage or config error), never a traceback, and never a
byte written into the checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from checkpoint_factory import build_checkpoint, build_hf_cache, fingerprint

from tests.conftest import dspark_argv

REPO = Path(__file__).resolve().parents[1]


def dspark(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(dspark_argv("verify-checkpoint", *args),
                          cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": os.pathsep.join(
                              p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
                               "PATH": "/usr/bin:/bin", "HOME": str(cwd)})
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    return build_checkpoint(tmp_path / "ckpt")


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "cwd"
    path.mkdir()
    return path


def test_clean_checkpoint_exits_0_and_writes_nothing(ckpt: Path, cwd: Path) -> None:
    before = fingerprint(ckpt)
    done = dspark("model=local", f"model.path={ckpt}", cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "structure" in done.stdout and "OK" in done.stdout
    assert fingerprint(ckpt) == before
    assert list(cwd.iterdir()) == []  # no Hydra outputs/ or log file either


def test_json_report_of_a_checkpoint_without_head(tmp_path: Path, cwd: Path) -> None:
    root = build_checkpoint(tmp_path / "nohead", with_confidence_head=False)
    done = dspark("model=local", f"model.path={root}", "--json", cwd=cwd)
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert data["ok"] is False and data["head_verified"] is False
    assert [p["code"] for p in data["problems"]] == ["confidence-head-missing"]
    assert "dspark_fixed" in data["problems"][0]["hint"]


def test_pinned_profile_mismatch_exits_1(ckpt: Path, cwd: Path) -> None:
    done = dspark("model=deepseek_v4_flash_dspark", f"model.path={ckpt}", "--json", cwd=cwd)
    assert done.returncode == 1
    subjects = {p["subject"] for p in json.loads(done.stdout)["problems"]}
    assert subjects == {"model.expected.config_sha256", "model.expected.index_sha256",
                        "model.expected.num_shards", "model.expected.total_bytes"}


@pytest.mark.parametrize(
    ("args", "message"),
    [(["model.path=/nonexistent/ckpt"], "does not exist"),
     (["model.path={ckpt}/config.json"], "not a directory"),
     ([], "`model.path` has no value"),
     (["model.path={ckpt}", "--manifest", "{cwd}/a", "--write-manifest", "{cwd}/b"],
      "exclude each other"),
     (["model.path={ckpt}", "--manifest", "{cwd}/none.sha256"], "cannot read --manifest"),
     (["model.path={ckpt}", "--hash"], "not Hugging Face cache blobs"),
     (["model.path={ckpt}", "--workers", "0"], "--workers 0"),
     (["model.path={ckpt}", "--write-manifest", "{ckpt}/ckpt.sha256"], "never writes into"),
     (["model.path={ckpt}", "--write-manifest", "{cwd}/no/such/dir/m"], "does not exist")],
    ids=["no-such-path", "a-file", "unset", "both-manifest-flags", "unreadable-manifest",
         "hash-without-blobs", "zero-workers", "manifest-into-checkpoint",
         "manifest-folder-missing"],
)
def test_usage_errors_exit_2(ckpt: Path, cwd: Path, args: list[str], message: str) -> None:
    before = fingerprint(ckpt)
    done = dspark("model=local", *(a.format(ckpt=ckpt, cwd=cwd) for a in args), cwd=cwd)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert fingerprint(ckpt) == before


def test_malformed_manifest_exits_2(ckpt: Path, cwd: Path) -> None:
    (cwd / "bad.sha256").write_text("not a manifest\n")
    done = dspark("model=local", f"model.path={ckpt}", "--manifest", str(cwd / "bad.sha256"),
                  cwd=cwd)
    assert done.returncode == 2 and "line 1" in done.stderr


def test_write_then_verify_a_manifest(ckpt: Path, cwd: Path) -> None:
    target = cwd / "ckpt.sha256"
    done = dspark("model=local", f"model.path={ckpt}", "--write-manifest", str(target), cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert "sha256sum -c" in done.stderr
    check = subprocess.run(["sha256sum", "-c", str(target)], cwd=ckpt, capture_output=True)
    assert check.returncode == 0
    done = dspark("model=local", f"model.path={ckpt}", "--manifest", str(target), "--json",
                  "--workers", "2", cwd=cwd)
    assert done.returncode == 0
    assert json.loads(done.stdout)["content"]["against_manifest"] == len(
        target.read_text().splitlines())
    (ckpt / "stray.bin").write_bytes(b"x")
    done = dspark("model=local", f"model.path={ckpt}", "--manifest", str(target), "--json",
                  cwd=cwd)
    assert done.returncode == 1
    assert [(p["code"], p["subject"]) for p in json.loads(done.stdout)["problems"]] == [
        ("file-extra", "stray.bin")]


def test_no_manifest_is_written_for_a_failing_checkpoint(tmp_path: Path, cwd: Path) -> None:
    root = build_checkpoint(tmp_path / "nohead", with_confidence_head=False)
    done = dspark("model=local", f"model.path={root}", "--write-manifest",
                  str(cwd / "m.sha256"), cwd=cwd)
    assert done.returncode == 1 and "manifest not written" in done.stderr
    assert not (cwd / "m.sha256").exists()


def test_hf_cache_blobs_with_hash(tmp_path: Path, cwd: Path) -> None:
    snapshot = build_hf_cache(tmp_path / "hub")
    done = dspark("model=local", f"model.path={snapshot}", "--hash", "--json", cwd=cwd)
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["content"]["against_blob_name"] == 6
    blob = (snapshot / "model-00001-of-00003.safetensors").resolve()
    raw = bytearray(blob.read_bytes())
    raw[-1] ^= 0x01
    blob.write_bytes(raw)
    repo = snapshot.parent.parent
    for target in (repo / "m.sha256", blob.parent / "m.sha256"):
        refused = dspark("model=local", f"model.path={snapshot}", "--write-manifest",
                         str(target), cwd=cwd)
        assert refused.returncode == 2 and "never writes into" in refused.stderr
    done = dspark("model=local", f"model.path={snapshot}", "--hash", "--json", cwd=cwd)
    assert done.returncode == 1
    assert json.loads(done.stdout)["problems"][0]["code"] == "blob-hash-mismatch"


def test_the_printed_check_line_is_shell_safe(tmp_path: Path, cwd: Path) -> None:
    marker = tmp_path / "X"
    odd = tmp_path / f"my ckpt $(touch {marker})"
    build_checkpoint(odd)
    target = cwd / "the manifest.sha256"
    done = dspark("model=local", f"model.path='{odd}'", "--write-manifest", str(target),
                  cwd=cwd)
    assert done.returncode == 0, done.stderr
    line = done.stderr.split("`")[1]
    ran = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert not marker.exists()
