"""verify_checkpoint: run every check on a checkpoint directory and return one result.

Read-only: nothing here writes to disk (writing a manifest is the command's job, from the
digests in the result). Order: structure (config, index, headers), pins, heads, then content
hashing when asked for, which is the only step that reads tensor data.

What it is asked to check (the checkpoint directory and the content request: hash HF blobs, a
sha256sum manifest to verify against, or one to write) is refused as usage errors before
anything is read; shared by the command and `dspark validate`'s stage.
"""

from __future__ import annotations

import dataclasses
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from dspark_cli.checkpoint.content import (
    ContentRequest,
    ManifestError,
    blob_expectation,
    check_content,
    list_checkpoint_files,
    parse_manifest,
    write_refusal,
)
from dspark_cli.checkpoint.head import check_head
from dspark_cli.checkpoint.result import Check, CheckpointResult, summarize
from dspark_cli.checkpoint.structure import check_pins, check_structure, gather_facts, load_layout
from dspark_cli.errors import UsageError

if TYPE_CHECKING:
    from dspark_cli.config.schema import ExpectedFacts

USAGE_HINT = "dspark verify-checkpoint model.path=DIR  (or model=NAME for a pinned profile)"


def checkpoint_root(path: str) -> Path:
    """The checkpoint directory `model.path` names; a usage error unless it is a directory."""
    root = Path(str(path)).expanduser()
    if not root.exists():
        raise UsageError(f"model.path {root} does not exist.", hint=USAGE_HINT)
    if not root.is_dir():
        raise UsageError(f"model.path {root} is not a directory; give the checkpoint directory "
                         "(the one holding config.json).", hint=USAGE_HINT)
    return root


def content_request(root: Path, *, hash_blobs: bool = False, manifest: Path | None = None,
                    write_manifest: Path | None = None,
                    workers: int | None = None) -> ContentRequest | None:
    """What content hashing the options ask for (None: none), every conflict and unusable
    file refused as a usage error before anything is read."""
    if workers is not None and workers < 1:
        raise UsageError(f"--workers {workers}: give at least 1.")
    manifest_file, listed = manifest, None
    if manifest_file and write_manifest:
        raise UsageError("--manifest and --write-manifest exclude each other: verify against "
                         "a manifest, or write a new one.")
    if manifest_file:
        _check_manifest_file(manifest_file.expanduser())
        try:
            # Bytes, not read_text: universal newlines would split a name at a lone CR.
            listed = parse_manifest(manifest_file.expanduser().read_bytes().decode(
                "utf-8", "surrogateescape"))
        except OSError as e:
            raise UsageError(f"cannot read --manifest {manifest_file}: {e.strerror}.") from None
        except ManifestError as e:
            raise UsageError(f"--manifest {manifest_file} is not a sha256sum manifest: {e}.",
                             hint="write one with --write-manifest FILE, or `sha256sum`") from None
    if write_manifest:
        target = write_manifest.expanduser()
        if not target.parent.is_dir():
            raise UsageError(f"--write-manifest {target}: folder {target.parent} does not exist.")
        protected = {root.resolve()} | {
            (root / f).resolve().parent for f in list_checkpoint_files(root)
        }
        if root.resolve().parent.name == "snapshots":  # a Hugging Face cache repo folder
            protected.add(root.resolve().parent.parent)
        refusal = write_refusal(target, protected)
        if refusal:
            raise UsageError(f"--write-manifest refused: {refusal}.",
                             hint="write the manifest somewhere else, e.g. ~/ckpt.sha256")
    if hash_blobs and listed is None and not write_manifest and not any(
        blob_expectation(root / f) for f in list_checkpoint_files(root)
    ):
        raise UsageError(f"--hash: the files in {root} are not Hugging Face cache blobs, so "
                         "their names promise no hash to check against.",
                         hint="pass --manifest FILE (write one once with --write-manifest FILE)")
    if not (hash_blobs or listed is not None or write_manifest):
        return None
    return ContentRequest(manifest=listed, every_file=bool(write_manifest),
                          workers=workers, unlisted_ok=_inside(root, manifest_file))


# A manifest lists files, one short line each: far past this it is not a manifest.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024


def _check_manifest_file(path: Path) -> None:
    """UsageError unless `path` is a regular file of a manifest's size: a FIFO, a device
    (`/dev/zero`) or a directory would block, never end, or fail later."""
    try:
        info = path.stat()
    except OSError as e:
        raise UsageError(f"cannot read --manifest {path}: {e.strerror}.") from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"--manifest {path} is not a regular file.",
                         hint="give the file `sha256sum` wrote")
    if info.st_size > MAX_MANIFEST_BYTES:
        raise UsageError(f"--manifest {path} holds {info.st_size:,} bytes, more than a manifest "
                         f"({MAX_MANIFEST_BYTES:,} at most).", hint="give the file `sha256sum` "
                         "wrote")


def _inside(root: Path, manifest: Path | None) -> frozenset[str]:
    """The manifest's own name when it is kept in the checkpoint directory, else nothing."""
    if manifest is None:
        return frozenset()
    try:
        return frozenset({manifest.expanduser().resolve().relative_to(root.resolve()).as_posix()})
    except ValueError:
        return frozenset()


def verify_checkpoint(
    root: Path,
    expected: ExpectedFacts | None = None,
    content: ContentRequest | None = None,
) -> CheckpointResult:
    """Check the checkpoint directory root (which must exist) and report every problem;
    `expected` (`model.expected`) adds the pins' check when any of its facts is set."""
    layout, problems = load_layout(root)
    structure = check_structure(layout)
    problems += structure.problems
    checks = [Check.structure]
    if expected is not None and any(getattr(expected, f.name) is not None
                                    for f in dataclasses.fields(expected)):
        checks.append(Check.pins)
        problems += check_pins(expected, gather_facts(layout))
    head = check_head(layout, structure)
    if head.declared:
        checks.append(Check.head)
        problems += head.problems
    hashed = None
    if content is not None:
        checks.append(Check.content)
        hashed, found = check_content(root, content)
        problems += found
    return CheckpointResult(
        path=str(root),
        checks=tuple(checks),
        problems=summarize(problems),
        num_shards=len(structure.headers),
        num_tensors=len(structure.tensors),
        total_bytes=structure.total_bytes,
        dspark=head.declared,
        head_verified=head.verified,
        content=hashed,
        draft_kind=head.kind,
        confidence_head=head.confidence_head,
    )
