"""Parallel hashing agrees with `openssl dgst -sha256` and `git hash-object`, on any worker
count, and turns an unreadable file into an error rather than an exception."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_cli.checkpoint.content import (
    CHUNK_BYTES,
    GIT_SHA1,
    SHA256,
    HashJob,
    hash_file,
    hash_files,
)


def openssl_sha256(path: Path) -> str:
    out = subprocess.run(["openssl", "dgst", "-sha256", "-r", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return out.split()[0]


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    """Sizes around the read buffer's edges, and an empty file."""
    sizes = [0, 1, CHUNK_BYTES - 1, CHUNK_BYTES, CHUNK_BYTES + 1, 3 * CHUNK_BYTES + 17]
    paths = []
    for i, size in enumerate(sizes):
        path = tmp_path / f"f{i}.bin"
        path.write_bytes(os.urandom(size))
        paths.append(path)
    return paths


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
@pytest.mark.parametrize("workers", [1, 2, 8])
def test_sha256_matches_openssl(files: list[Path], workers: int) -> None:
    results = hash_files([HashJob(p.name, p) for p in files], workers=workers, progress=False)
    assert set(results) == {p.name for p in files}
    for path in files:
        outcome = results[path.name]
        assert outcome.error is None and outcome.size == path.stat().st_size
        assert outcome.digests[SHA256] == openssl_sha256(path)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_blob_sha1_matches_git(files: list[Path]) -> None:
    for path in files[:4]:
        want = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True,
                              check=True).stdout.strip()
        outcome = hash_file(path, (SHA256, GIT_SHA1))
        assert outcome.digests[GIT_SHA1] == want
        assert outcome.digests[SHA256] == openssl_sha256(path)


def test_progress_callback_sees_every_byte(files: list[Path]) -> None:
    seen: list[int] = []
    outcome = hash_file(files[-1], on_bytes=seen.append)
    assert sum(seen) == outcome.size == files[-1].stat().st_size
    assert max(seen) <= CHUNK_BYTES


def test_unreadable_paths_become_errors(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    results = hash_files([HashJob("dir", tmp_path / "dir"),
                          HashJob("dangling", tmp_path / "dangling")], progress=False)
    assert results["dir"].error and results["dir"].digests == {}
    assert "No such file" in results["dangling"].error


def test_progress_bar_renders_to_stderr(tmp_path: Path) -> None:
    """A real terminal-less run with the bar forced on writes it to stderr, never stdout."""
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(2 * CHUNK_BYTES))
    code = (
        "from pathlib import Path; from dspark_cli.checkpoint.content import HashJob, hash_files;"
        f"r = hash_files([HashJob('d', Path({str(data)!r}))], progress=True);"
        "print(r['d'].digests['sha256'])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.strip() == openssl_sha256(data)
    assert "hashing 1 files" in done.stderr and "MiB" in done.stderr
