"""Manifests written by common tools verify exactly as `sha256sum -c` verifies them.

Every manifest here is written by the real `sha256sum` (through `find`, a glob, `--tag`, `-b`)
or by a one-line transformation of its output that `sha256sum -c` still accepts (CRLF, BSD's
`<hash> name`, upper-case hex); each test runs `sha256sum -c` on the same file and checks that
dspark agrees, passing and after a byte is flipped. Names are hostile on purpose: spaces,
newlines, backslashes, a leading `*` or blank, parentheses. Names outside the checkpoint are
refused and never opened.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from checkpoint_factory import build_checkpoint

from dspark_cli.checkpoint.content import ManifestError, parse_manifest
from dspark_cli.checkpoint.result import Check
from dspark_cli.checkpoint.verify import ContentRequest, verify_checkpoint
from tests.conftest import run_dspark

pytestmark = pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils")
AWKWARD = ["sp ace.txt", "new\nline.txt", "back\\slash.txt", "*star.txt", " lead.txt",
           "tab\tname.txt", "cr\r.txt", "close (1).txt", "a) = b.txt", "ünï.txt", "trail .txt"]
FIND = "find . -type f -exec sha256sum {} +"
GENERATORS = {
    "find": FIND,
    "find, binary mode": "find . -type f -exec sha256sum -b {} +",
    "find, CRLF": f"{FIND} | sed 's/$/\\r/'",
    "find, --tag (BSD style)": "find . -type f -exec sha256sum --tag {} +",
    "find, --tag, CRLF": "find . -type f -exec sha256sum --tag {} + | sed 's/$/\\r/'",
    "one blank (BSD md5 -r style)": f"{FIND} | sed -E 's/^(\\\\?[0-9a-f]{{64}}) /\\1/'",
    "upper-case hex": f"{FIND} | sed -E 's/^(\\\\?)([0-9a-f]{{64}})/\\1\\U\\2/'",
    "glob ./*, comments": "echo '# written by sha256sum'; sha256sum ./*.* ./sub/* .cache/*",
    "plain names, --": "sha256sum -- *.* sub/* .cache/*",
}


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    root = build_checkpoint(tmp_path / "ckpt")
    for i, name in enumerate(AWKWARD):
        (root / name).write_text(f"file {i}\n")
    (root / "sub").mkdir()
    (root / "sub" / "notes.txt").write_text("notes\n")
    (root / ".cache").mkdir()
    (root / ".cache" / "download.lock").write_text("")
    return root


def write_with(root: Path, command: str, target: Path) -> Path:
    done = subprocess.run(["bash", "-c", command], cwd=root, capture_output=True, check=True)
    target.write_bytes(done.stdout)
    return target


def coreutils_ok(root: Path, manifest: Path) -> bool:
    done = subprocess.run(["sha256sum", "-c", str(manifest)], cwd=root, capture_output=True)
    assert b"improperly formatted" not in done.stderr, done.stderr
    return done.returncode == 0


def dspark_problems(root: Path, manifest: Path) -> list[tuple[str, str]]:
    entries = parse_manifest(manifest.read_bytes().decode("utf-8", "surrogateescape"))
    report = verify_checkpoint(root, content=ContentRequest(manifest=entries, progress=False))
    return [(p.code, p.subject) for p in report.problems_of(Check.content)]


@pytest.mark.parametrize("command", GENERATORS.values(), ids=GENERATORS.keys())
def test_dspark_and_sha256sum_agree(ckpt: Path, tmp_path: Path, command: str) -> None:
    manifest = write_with(ckpt, command, tmp_path / "SHA256SUMS")
    assert coreutils_ok(ckpt, manifest)
    assert dspark_problems(ckpt, manifest) == []
    for name in ("new\nline.txt", "a) = b.txt", "sub/notes.txt"):
        (ckpt / name).write_text("flipped\n")
        assert not coreutils_ok(ckpt, manifest)
        assert dspark_problems(ckpt, manifest) == [("hash-mismatch", name)]
        (ckpt / name).unlink()
        assert not coreutils_ok(ckpt, manifest)
        assert dspark_problems(ckpt, manifest) == [("file-missing", name)]
        (ckpt / name).write_text(f"file {AWKWARD.index(name)}\n" if name in AWKWARD
                                 else "notes\n")


@pytest.mark.parametrize("line", [
    "{h}  a\n{h} a\n",            # the two forms mixed: coreutils skips the second line
    "{h}  a\n \n",                # a blank-only line
    "\\{h}  x\\qy\n",             # an escape GNU does not know
    "SHA256 (a) = {h} \n",        # anything after a tagged hash
    "MD5 (a) = {h}\n",
    "{h}\n",
])
def test_lines_sha256sum_skips_are_refused(tmp_path: Path, line: str) -> None:
    (tmp_path / "a").write_text("a")
    digest = subprocess.run(["sha256sum", "a"], cwd=tmp_path, capture_output=True,
                            text=True, check=True).stdout[:64]
    text = line.format(h=digest)
    (tmp_path / "m").write_text(text)
    done = subprocess.run(["sha256sum", "-c", "m"], cwd=tmp_path, capture_output=True, text=True)
    assert "improperly formatted" in done.stderr or "no properly formatted" in done.stderr
    with pytest.raises(ManifestError, match="line"):
        parse_manifest(text)


def dspark(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = run_dspark("verify-checkpoint", *args, cwd=cwd)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_a_find_manifest_kept_in_the_checkpoint_verifies_from_the_cli(ckpt: Path,
                                                                       tmp_path: Path) -> None:
    manifest = write_with(ckpt, FIND, tmp_path / "SHA256SUMS").rename(ckpt / "SHA256SUMS")
    assert coreutils_ok(ckpt, manifest)
    done = dspark("model=local", f"model.path={ckpt}", "--manifest", str(manifest), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (ckpt / "sp ace.txt").write_text("flipped")
    done = dspark("model=local", f"model.path={ckpt}", "--manifest", str(manifest), cwd=tmp_path)
    assert done.returncode == 1
    assert "hash-mismatch" in done.stdout and "sp ace.txt" in done.stdout


@pytest.mark.parametrize("name", ["/{outside}/secret.fifo", "../secret.fifo",
                                  "./sub/../../secret.fifo"])
def test_names_outside_the_checkpoint_are_refused_and_never_opened(
        ckpt: Path, tmp_path: Path, name: str) -> None:
    # A FIFO: opening it would block, so a finished run shows that nothing opened it.
    os.mkfifo(tmp_path / "secret.fifo")
    listed = write_with(ckpt, FIND, tmp_path / "m").read_text("utf-8", "surrogateescape")
    line = f"{'0' * 64}  {name.format(outside=str(tmp_path).lstrip('/'))}\n"
    manifest = tmp_path / "m"
    manifest.write_text(listed + line, "utf-8", "surrogateescape")
    done = dspark("model=local", f"model.path={ckpt}", "--manifest", str(manifest), "--json",
                  cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "manifest-path-unsafe" in done.stdout
    assert "hash-mismatch" not in done.stdout and "file-extra" not in done.stdout


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "directory"])
def test_a_manifest_that_is_no_regular_file_is_refused_without_reading(
        ckpt: Path, tmp_path: Path, kind: str) -> None:
    target = Path(kind) if kind.startswith("/") else tmp_path / kind
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    done = dspark("model=local", f"model.path={ckpt}", "--manifest", str(target), cwd=tmp_path)
    assert done.returncode == 2
    assert "is not a regular file" in done.stderr
