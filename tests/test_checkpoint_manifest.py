"""Manifests that `sha256sum -c` reads (and `sha256sum` output we read), every mismatch, missing
and extra file named, and Hugging Face cache blobs checked against their own names."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from checkpoint_factory import build_checkpoint, build_hf_cache, fingerprint

from dspark_cli.checkpoint.content import (
    ManifestError,
    blob_expectation,
    format_manifest,
    list_checkpoint_files,
    parse_manifest,
    write_manifest,
    write_refusal,
)
from dspark_cli.checkpoint.result import Check
from dspark_cli.checkpoint.verify import ContentRequest, verify_checkpoint

pytestmark = pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils")
SHARD2 = "model-00002-of-00003.safetensors"


def sha256sum_output(root: Path, names: list[str]) -> str:
    return subprocess.run(["sha256sum", "--", *names], cwd=root, capture_output=True,
                          check=True).stdout.decode("utf-8", "surrogateescape")


def content_problems(root: Path, request: ContentRequest) -> list[tuple[str, str]]:
    before = fingerprint(root.parent)
    report = verify_checkpoint(root, content=request)
    assert fingerprint(root.parent) == before
    return [(p.code, p.subject) for p in report.problems_of(Check.content)]


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    root = build_checkpoint(tmp_path / "ckpt")
    (root / "sub").mkdir()
    (root / "sub" / "notes.txt").write_text("tokenizer notes\n")
    (root / ".cache").mkdir()
    (root / ".cache" / "download.lock").write_text("")
    return root


def test_files_listed_relative_sorted_without_hidden(ckpt: Path) -> None:
    files = list_checkpoint_files(ckpt)
    assert files == sorted(files) and "sub/notes.txt" in files and "config.json" in files
    assert not any(f.startswith(".") for f in files)


def test_written_manifest_passes_sha256sum_c_and_our_verification(ckpt: Path,
                                                                 tmp_path: Path) -> None:
    report = verify_checkpoint(ckpt, content=ContentRequest(every_file=True, progress=False))
    digests = report.content.digests
    assert set(digests) == set(list_checkpoint_files(ckpt))
    target = tmp_path / "ckpt.sha256"
    write_manifest(target, format_manifest(digests))
    done = subprocess.run(["sha256sum", "-c", "--strict", str(target)], cwd=ckpt,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": OK") == len(digests)
    request = ContentRequest(manifest=parse_manifest(target.read_text()), progress=False)
    assert content_problems(ckpt, request) == []


@pytest.mark.parametrize("name", ["back\\slash.txt", "new\nline.txt", "carriage\rreturn.txt",
                                  "two  spaces.txt", "star*.txt"])
def test_awkward_names_round_trip_with_coreutils(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text("x")
    ours = format_manifest({name: parse_manifest(sha256sum_output(tmp_path, [name]))[name]})
    assert ours == sha256sum_output(tmp_path, [name])
    assert parse_manifest(ours) == parse_manifest(sha256sum_output(tmp_path, [name]))


def test_binary_mode_lines_are_read(ckpt: Path) -> None:
    out = subprocess.run(["sha256sum", "-b", "config.json"], cwd=ckpt, capture_output=True,
                         text=True, check=True).stdout
    assert " *config.json" in out
    assert list(parse_manifest(out)) == ["config.json"]


def test_mismatch_missing_and_extra_are_each_named(ckpt: Path) -> None:
    names = list_checkpoint_files(ckpt)
    manifest = parse_manifest(sha256sum_output(ckpt, names))
    manifest["gone.safetensors"] = "0" * 64
    manifest["config.json"] = "1" * 64
    del manifest["sub/notes.txt"]
    problems = content_problems(ckpt, ContentRequest(manifest=manifest, progress=False))
    assert sorted(problems) == [
        ("file-extra", "sub/notes.txt"), ("file-missing", "gone.safetensors"),
        ("hash-mismatch", "config.json"),
    ]


def test_one_flipped_byte_in_a_shard_is_a_mismatch(ckpt: Path) -> None:
    manifest = parse_manifest(sha256sum_output(ckpt, list_checkpoint_files(ckpt)))
    raw = bytearray((ckpt / SHARD2).read_bytes())
    raw[-1] ^= 1
    (ckpt / SHARD2).write_bytes(raw)
    report = verify_checkpoint(ckpt, content=ContentRequest(manifest=manifest, progress=False))
    [p] = report.problems
    assert (p.code, p.subject, p.expected) == ("hash-mismatch", SHARD2, manifest[SHARD2])


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/hostname", "a/../../b"])
def test_manifest_paths_that_climb_out_are_refused(ckpt: Path, name: str) -> None:
    manifest = parse_manifest(sha256sum_output(ckpt, list_checkpoint_files(ckpt)))
    manifest[name] = "0" * 64
    problems = content_problems(ckpt, ContentRequest(manifest=manifest, progress=False))
    assert problems == [("manifest-path-unsafe", name)]


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "no files"), ("abc  file\n", "line 1"), ("0" * 64 + "\n", "line 1"),
     ("0" * 64 + "  a\n" + "1" * 64 + "  a\n", "again")],
)
def test_malformed_manifests(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        parse_manifest(text)


def test_hf_blobs_verified_against_their_names(tmp_path: Path) -> None:
    snapshot = build_hf_cache(tmp_path / "hub")
    expectations = {n: blob_expectation(snapshot / n) for n in list_checkpoint_files(snapshot)}
    assert {a for a, _ in expectations.values()} == {"sha256", "git-sha1"}
    report = verify_checkpoint(snapshot, content=ContentRequest(progress=False))
    assert report.ok and report.content.against_blob_name == len(expectations)


def test_corrupt_hf_blob_is_named(tmp_path: Path) -> None:
    snapshot = build_hf_cache(tmp_path / "hub")
    blob = (snapshot / SHARD2).resolve()
    raw = bytearray(blob.read_bytes())
    raw[-1] ^= 0xFF  # tensor data: the header stays valid, only the hash can tell
    blob.write_bytes(raw)
    assert verify_checkpoint(snapshot).ok
    problems = content_problems(snapshot, ContentRequest(progress=False))
    assert problems == [("blob-hash-mismatch", SHARD2)]


def test_corrupt_small_hf_blob_is_named(tmp_path: Path) -> None:
    snapshot = build_hf_cache(tmp_path / "hub")
    blob = (snapshot / "tokenizer.json").resolve()
    blob.write_text('{"version": "2.0"}')
    problems = content_problems(snapshot, ContentRequest(progress=False))
    assert problems == [("blob-hash-mismatch", "tokenizer.json")]


def test_plain_files_are_not_blobs(ckpt: Path) -> None:
    assert all(blob_expectation(ckpt / n) is None for n in list_checkpoint_files(ckpt))


def test_manifest_may_not_be_written_into_the_checkpoint(ckpt: Path, tmp_path: Path) -> None:
    protected = [ckpt.resolve()]
    assert write_refusal(ckpt / "m.sha256", protected)
    assert write_refusal(ckpt / "sub" / "m.sha256", protected)
    assert write_refusal(tmp_path / "ckpt" / "." / "m.sha256", protected)
    assert write_refusal(tmp_path / "m.sha256", protected) is None
