"""verify_checkpoint: run every check on a checkpoint directory and return one result.

Read-only: nothing here writes to disk (writing a manifest is the command's job, from the
digests in the result). Order: structure (config, index, headers), pins, heads, then content
hashing when asked for, which is the only step that reads tensor data.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from dspark_cli.checkpoint.hashing import SHA256, HashJob, hash_files
from dspark_cli.checkpoint.head import check_head
from dspark_cli.checkpoint.index import load_layout
from dspark_cli.checkpoint.manifest import (
    blob_expectation,
    compare_with_manifest,
    is_file,
    list_checkpoint_files,
    unsafe_name,
)
from dspark_cli.checkpoint.pins import check_pins, gather_facts
from dspark_cli.checkpoint.result import (
    Check,
    CheckpointResult,
    Content,
    Problem,
    problem,
    summarize,
)
from dspark_cli.checkpoint.structure import check_structure


@dataclass(frozen=True)
class ContentRequest:
    """Which file contents to hash: blobs always; manifest entries; or every file."""

    manifest: Mapping[str, str] | None = None  # verify against this (relative path -> sha256)
    every_file: bool = False  # hash every file, for a manifest to be written
    # Files the manifest need not list: the manifest itself, kept in the checkpoint (`sha256sum
    # -c` never asks a manifest to list itself).
    unlisted_ok: frozenset[str] = frozenset()
    workers: int | None = None
    progress: bool | None = None


def _jobs(root: Path, on_disk: list[str], request: ContentRequest) -> dict[str, HashJob]:
    wanted = set(on_disk) if request.every_file else set()
    if request.manifest is not None:
        wanted |= {
            n for n in request.manifest if not unsafe_name(n) and is_file(root / n)
        }
    jobs = {}
    for name in sorted(wanted | set(on_disk)):
        algorithms = {SHA256} if name in wanted else set()
        blob = blob_expectation(root / name)
        if blob:
            algorithms.add(blob[0])
        if algorithms:
            jobs[name] = HashJob(name, root / name, tuple(sorted(algorithms)))
    return jobs


def check_content(root: Path, request: ContentRequest) -> tuple[Content, list[Problem]]:
    """Hash what the request asks for; check blobs against their names and the manifest."""
    on_disk = list_checkpoint_files(root)
    jobs = _jobs(root, on_disk, request)
    start = time.perf_counter()
    outcomes = hash_files(jobs.values(), request.workers, request.progress)
    seconds = time.perf_counter() - start

    problems = []
    sha256: dict[str, str | None] = {}
    blobs_checked = 0
    for name, outcome in sorted(outcomes.items()):
        if outcome.error:
            problems.append(
                problem("file-unreadable", Check.content, name, "a readable file", outcome.error)
            )
            sha256[name] = None
            continue
        sha256[name] = outcome.digests.get(SHA256)
        blob = blob_expectation(root / name)
        if blob:
            blobs_checked += 1
            algorithm, want = blob
            if outcome.digests[algorithm] != want:
                problems.append(
                    problem("blob-hash-mismatch", Check.content, name,
                            f"{algorithm} {want} (the blob's name)",
                            outcome.digests[algorithm])
                )
    if request.manifest is not None:
        problems += compare_with_manifest(
            request.manifest, root, [n for n in on_disk if n not in request.unlisted_ok], sha256)
    digests = {n: d for n, d in sha256.items() if d is not None}
    content = Content(
        hashed_files=len(outcomes),
        hashed_bytes=sum(o.size for o in outcomes.values()),
        against_manifest=sum(1 for n in request.manifest or {} if n in digests),
        against_blob_name=blobs_checked,
        seconds=round(seconds, 3),
        digests=MappingProxyType(digests),
    )
    return content, problems


def verify_checkpoint(
    root: Path,
    expected: Mapping[str, Any] | None = None,
    content: ContentRequest | None = None,
) -> CheckpointResult:
    """Check the checkpoint directory root (which must exist) and report every problem."""
    layout, problems = load_layout(root)
    structure = check_structure(layout)
    problems += structure.problems
    checks = [Check.structure]
    if expected and any(v is not None for v in expected.values()):
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
    )
