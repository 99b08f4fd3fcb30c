"""`dspark verify-checkpoint`: compose -> verify -> render (rich table or --json) -> exit code.

Exit codes: 0 every check passed, 1 a check failed, 2 usage or config error (no such directory,
a bad manifest file, conflicting flags). The checkpoint directory is only ever read.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dspark_cli.checkpoint.content import format_manifest, write_manifest
from dspark_cli.checkpoint.result import render
from dspark_cli.checkpoint.verify import checkpoint_root, content_request, verify_checkpoint
from dspark_cli.cli.command import Command
from dspark_cli.console import print_json
from dspark_cli.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(read_only=True)  # no Hydra run directory: this command writes nothing
    parser.add_argument("--json", action="store_true",
                        help="print a machine-readable report on stdout")
    parser.add_argument("--hash", action="store_true",
                        help="hash file contents: Hugging Face cache blobs are checked against "
                             "their own names (reads every byte)")
    parser.add_argument("--manifest", metavar="FILE", type=Path,
                        help="verify every file against this sha256sum-format manifest")
    parser.add_argument("--write-manifest", metavar="FILE", type=Path,
                        help="hash every file and write a sha256sum-format manifest to FILE "
                             "(outside the checkpoint), when every check passes")
    parser.add_argument("--workers", metavar="N", type=int, default=None,
                        help="hashing threads (default: one per CPU)")


def run(cfg: LaunchConf, opts: argparse.Namespace) -> int:
    root = checkpoint_root(cfg.model.path)
    content = content_request(root, hash_blobs=opts.hash, manifest=opts.manifest,
                              write_manifest=opts.write_manifest, workers=opts.workers)
    result = verify_checkpoint(root, cfg.model.expected, content)

    written = None
    if opts.write_manifest and result.ok and result.content is not None:
        try:
            write_manifest(opts.write_manifest, format_manifest(result.content.digests))
        except OSError as e:
            raise UsageError(f"cannot write --write-manifest {opts.write_manifest}: "
                             f"{e.strerror}.") from None
        written = str(opts.write_manifest)

    if opts.json:
        print_json({**result.to_dict(), "manifest_written": written})
    else:
        render(result)
    if written and result.content is not None:  # written only from the hashed content
        print(f"dspark: wrote {written} ({len(result.content.digests)} files); "
              f"`cd {shlex.quote(str(root))} && "
              f"{shlex.join(['sha256sum', '-c', str(Path(written).resolve())])}` checks it too.",
              file=sys.stderr)
    elif opts.write_manifest:
        print("dspark: manifest not written: the checkpoint failed its checks.", file=sys.stderr)
    return int(ExitCode.OK if result.ok else ExitCode.CHECK_FAILED)


COMMAND = Command(
    name="verify-checkpoint",
    examples=(
        ("dspark verify-checkpoint model=deepseek_v4_flash_dspark",
         "the seed's checkpoint, its pins"),
        ("dspark verify-checkpoint model=deepseek_v4_flash_dspark --hash",
         "and every file's SHA-256"),
        ("dspark verify-checkpoint model.path=/path/to/checkpoint", "any checkpoint directory"),
        ("dspark verify-checkpoint model.path=DIR --write-manifest ckpt.sha256",
         "hash it, keep a manifest"),
    ),
    config="verify-checkpoint",
    add_arguments=add_arguments,
    run=run,
    # A checkpoint is judged the same on every host: no hardware detected, hw stays null.
    needs_machine=False,
    # The one group a checkpoint is judged by (the others compose, and change nothing here).
    groups=("model",),
)
