"""`dspark verify-checkpoint`: compose -> verify -> render (rich table or --json) -> exit code.

Exit codes: 0 every check passed, 1 a check failed, 2 usage or config error (no such directory,
a bad manifest file, conflicting flags). The checkpoint directory is only ever read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from dspark_cli.errors import ExitCode, UsageError

USAGE_HINT = "dspark verify-checkpoint model.path=DIR  (or model=NAME for a pinned profile)"


def needs_machine(opts: argparse.Namespace) -> bool:
    """A checkpoint is judged the same on every host: never detect hardware."""
    return False


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


def checkpoint_root(cfg: DictConfig) -> Path:
    """The checkpoint directory from model.path; a usage error unless it is a directory."""
    try:
        raw = cfg.model.path
    except MissingMandatoryValue:
        raise UsageError("model.path is not set.", hint=USAGE_HINT) from None
    root = Path(str(raw)).expanduser()
    if not root.exists():
        raise UsageError(f"model.path {root} does not exist.", hint=USAGE_HINT)
    if not root.is_dir():
        raise UsageError(f"model.path {root} is not a directory; give the checkpoint directory "
                         "(the one holding config.json).", hint=USAGE_HINT)
    return root


def content_request(root: Path, opts: argparse.Namespace) -> Any:
    from dspark_cli.checkpoint.manifest import (
        ManifestError,
        blob_expectation,
        list_checkpoint_files,
        parse_manifest,
        write_refusal,
    )
    from dspark_cli.checkpoint.verify import ContentRequest

    if opts.workers is not None and opts.workers < 1:
        raise UsageError(f"--workers {opts.workers}: give at least 1.")
    if opts.manifest and opts.write_manifest:
        raise UsageError("--manifest and --write-manifest exclude each other: verify against "
                         "a manifest, or write a new one.")
    manifest = None
    if opts.manifest:
        _check_manifest_file(opts.manifest.expanduser())
        try:
            # Bytes, not read_text: universal newlines would split a name at a lone CR.
            manifest = parse_manifest(opts.manifest.expanduser().read_bytes().decode(
                "utf-8", "surrogateescape"))
        except OSError as e:
            raise UsageError(f"cannot read --manifest {opts.manifest}: {e.strerror}.") from None
        except ManifestError as e:
            raise UsageError(f"--manifest {opts.manifest} is not a sha256sum manifest: {e}.",
                             hint="write one with --write-manifest FILE, or `sha256sum`") from None
    if opts.write_manifest:
        target = opts.write_manifest.expanduser()
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
    if opts.hash and manifest is None and not opts.write_manifest and not any(
        blob_expectation(root / f) for f in list_checkpoint_files(root)
    ):
        raise UsageError(f"--hash: the files in {root} are not Hugging Face cache blobs, so "
                         "their names promise no hash to check against.",
                         hint="pass --manifest FILE (write one once with --write-manifest FILE)")
    if not (opts.hash or manifest is not None or opts.write_manifest):
        return None
    return ContentRequest(manifest=manifest, every_file=bool(opts.write_manifest),
                          workers=opts.workers, unlisted_ok=_inside(root, opts.manifest))


# A manifest lists files, one short line each: far past this it is not a manifest.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024


def _check_manifest_file(path: Path) -> None:
    """UsageError unless `path` is a regular file of a manifest's size: a FIFO, a device
    (`/dev/zero`) or a directory would block, never end, or fail later."""
    import stat

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


def run(cfg: DictConfig, opts: argparse.Namespace) -> int:
    from dspark_cli.checkpoint.manifest import format_manifest, write_manifest
    from dspark_cli.checkpoint.verify import verify_checkpoint

    root = checkpoint_root(cfg)
    content = content_request(root, opts)
    expected = OmegaConf.to_container(cfg.model.expected, resolve=True) if "expected" in (
        cfg.model) else {}
    result = verify_checkpoint(root, expected, content)

    written = None
    if opts.write_manifest and result.ok and result.content is not None:
        try:
            write_manifest(opts.write_manifest, format_manifest(result.content.digests))
        except OSError as e:
            raise UsageError(f"cannot write --write-manifest {opts.write_manifest}: "
                             f"{e.strerror}.") from None
        written = str(opts.write_manifest)

    if opts.json:
        print(json.dumps({**result.to_dict(), "manifest_written": written}, indent=2))
    else:
        from dspark_cli.checkpoint.render import render

        render(result)
    if written:
        print(f"dspark: wrote {written} ({len(result.content.digests)} files); "
              f"`cd {root} && sha256sum -c {Path(written).resolve()}` checks it too.",
              file=sys.stderr)
    elif opts.write_manifest:
        print("dspark: manifest not written: the checkpoint failed its checks.", file=sys.stderr)
    return int(ExitCode.OK if result.ok else ExitCode.CHECK_FAILED)
