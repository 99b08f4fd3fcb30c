"""What a verify-checkpoint run found: every problem, as frozen values the command renders.

Library functions never print or exit: they return problems, each with a stable `code`, the
`subject` it is about (a file, a tensor, a config key), what was `expected`, what was found
(`actual`), and a `hint` that says how to proceed on purpose. `HINTS` is the one table that maps
a code to its default hint.

`render` is the people's view of a result: a rich summary of each check and a table of every
problem with its hint, on stdout (rich is imported only when a person reads it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from dspark_cli.compat import StrEnum
from dspark_cli.console import output

if TYPE_CHECKING:
    from rich.console import Console

HEAD_WAYS_OUT = (
    "use a checkpoint revision that ships the DSpark confidence head, or serve without adaptive "
    "verification (speculative=dspark_fixed)"
)


class Check(StrEnum):
    """The groups of checks, in the order they run."""

    structure = "structure"
    pins = "pins"
    head = "head"
    content = "content"


HINTS: Mapping[str, str] = MappingProxyType(
    {
        "config-missing": "point model.path at the checkpoint directory (the one with config.json)",
        "config-invalid": "config.json must be a JSON object; re-download it",
        "index-invalid": "re-download model.safetensors.index.json",
        "weights-missing": "the directory holds no *.safetensors; re-download the checkpoint",
        "shard-path-unsafe": "the index names a file outside the checkpoint directory; do not "
        "load this checkpoint, re-download its index",
        "shard-missing": "re-download the missing shard",
        "header-invalid": "the shard is truncated or corrupt; re-download it",
        "tensor-missing": "the shard does not hold a tensor the index names; re-download the shard "
        "and the index from the same revision",
        "tensor-unlisted": "the shard holds a tensor the index does not name; re-download the "
        "shard and the index from the same revision",
        "tensor-duplicate": "two shards hold the same tensor; remove the stray shard",
        "total-size-mismatch": "the index and the shards come from different revisions; "
        "re-download both",
        "pin-mismatch": "this is not the pinned checkpoint: fetch the pinned revision, or pick a "
        "profile that matches (model=local pins nothing)",
        "dspark-key-missing": "config.json lacks a key DSpark needs; use the checkpoint's own "
        "config.json",
        "dspark-key-invalid": "config.json has a DSpark key of the wrong type; use the "
        "checkpoint's own config.json",
        "confidence-head-disabled": HEAD_WAYS_OUT,
        "mtp-stage-missing": "the DSpark draft is incomplete; re-download the shards that hold "
        "mtp.* tensors",
        "confidence-head-missing": HEAD_WAYS_OUT,
        "confidence-head-shape": HEAD_WAYS_OUT,
        "confidence-head-dtype": HEAD_WAYS_OUT,
        "confidence-head-bias": HEAD_WAYS_OUT + "; vLLM's loader fails on this bias",
        "confidence-head-not-finite": HEAD_WAYS_OUT,
        "markov-head-missing": "the DSpark Markov head is missing; re-download the mtp.* shards",
        "markov-head-shape": "the DSpark Markov head does not match config.json; re-download the "
        "checkpoint from one revision",
        "draft-tensor-missing": "the DSpark draft lacks a tensor vLLM loads; re-download the "
        "draft checkpoint",
        "draft-tensor-shape": "the DSpark draft's tensor does not match its config.json; "
        "re-download the draft from one revision",
        "head-unreadable": "re-download the shard that holds the head",
        "hash-mismatch": "the file's content differs from the manifest; re-download it",
        "file-missing": "a file the manifest lists is not in the checkpoint; re-download it",
        "file-extra": "a file the manifest does not list is in the checkpoint; remove it or "
        "write a new manifest",
        "file-unreadable": "check the file's permissions and the disk",
        "blob-hash-mismatch": "this Hugging Face cache blob is corrupt; delete it and download "
        "the revision again",
        "manifest-path-unsafe": "the manifest names a file outside the checkpoint directory; "
        "use a manifest written by `dspark verify-checkpoint --write-manifest`",
    }
)


@dataclass(frozen=True)
class Problem:
    """One thing that is wrong, with enough context to act on it."""

    code: str
    check: Check
    subject: str
    expected: str
    actual: str
    hint: str
    count: int = 1  # more than 1: a summary standing for this many problems of its code


# Problems of one code listed one by one; the rest of that code become one summary line, so the
# report stays small however many a damaged checkpoint has.
LISTED_PER_CODE = 20


def summarize(problems: list[Problem], listed: int = LISTED_PER_CODE) -> tuple[Problem, ...]:
    """The first `listed` problems of each code, then one problem counting the rest."""
    kept: list[Problem] = []
    rest: dict[str, list[Problem]] = {}
    seen: dict[str, int] = {}
    for p in problems:
        seen[p.code] = seen.get(p.code, 0) + 1
        if seen[p.code] <= listed:
            kept.append(p)
        else:
            rest.setdefault(p.code, []).append(p)
    for code, more in rest.items():
        first = more[0]
        kept.append(Problem(code, first.check, f"{len(more):,} more like the above",
                            first.expected, f"{first.subject}: {first.actual}, ...",
                            first.hint, count=sum(p.count for p in more)))
    return tuple(kept)


def problem(
    code: str, check: Check, subject: str, expected: object, actual: object, hint: str = ""
) -> Problem:
    """Build a Problem, taking the hint from HINTS unless one is given; a value from a hostile
    file (a 100 MB string in config.json) is cut to `SHOWN_CHARS`."""
    return Problem(code, check, _shown(subject), _shown(expected), _shown(actual),
                   hint or HINTS[code])


SHOWN_CHARS = 300


def _shown(value: object) -> str:
    text = str(value)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text):,} characters)"


@dataclass(frozen=True)
class Content:
    """What full-content hashing did: how many files were hashed and checked against what."""

    hashed_files: int = 0
    hashed_bytes: int = 0
    against_manifest: int = 0
    against_blob_name: int = 0
    seconds: float = 0.0
    # relative path -> SHA-256, for --write-manifest
    digests: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointResult:
    """Everything a verify-checkpoint run found; `ok` when there is no problem."""

    path: str
    checks: tuple[Check, ...]
    problems: tuple[Problem, ...]
    num_shards: int = 0
    num_tensors: int = 0
    total_bytes: int = 0
    dspark: bool = False
    head_verified: bool = False
    content: Content | None = None
    # the DSpark draft's kind (head.HeadResult.kind): "deepseek_v4" or "qwen3_dspark"
    draft_kind: str | None = None
    # config.json declares a confidence head (head.HeadResult.confidence_head)
    confidence_head: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def problems_of(self, check: Check) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.check == check)

    def count_of(self, problems: tuple[Problem, ...]) -> int:
        """How many problems these stand for (a summary counts all it stands for)."""
        return sum(p.count for p in problems)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (`--json`)."""
        content = None
        if self.content is not None:
            content = {f.name: getattr(self.content, f.name) for f in fields(self.content)}
            content["digests"] = dict(sorted(self.content.digests.items()))
        return {
            "path": self.path,
            "ok": self.ok,
            "checks": {
                c.value: ("failed" if self.problems_of(c) else "passed") for c in self.checks
            },
            "num_shards": self.num_shards,
            "num_tensors": self.num_tensors,
            "total_bytes": self.total_bytes,
            "dspark": self.dspark,
            "head_verified": self.head_verified,
            "draft_kind": self.draft_kind,
            "confidence_head": self.confidence_head,
            "content": content,
            "problem_count": self.count_of(self.problems),
            "problems": [asdict(p) | {"check": p.check.value} for p in self.problems],
        }


def _detail(result: CheckpointResult, check: Check) -> str:
    if check is Check.structure:
        return (f"{result.num_shards} shards, {result.num_tensors:,} tensors, "
                f"{result.total_bytes:,} bytes")
    if check is Check.pins:
        return "model.expected.* compared with the files"
    if check is Check.head and result.draft_kind == "qwen3_dspark":
        head = ("confidence head" if result.confidence_head
                else "no confidence head declared (a fixed K only)")
        return (f"Qwen3 DSpark draft: keys, Markov head, {head} and every tensor's shape verified"
                if result.head_verified else "Qwen3 DSpark draft NOT verified")
    if check is Check.head:
        return ("DSpark confidence and Markov heads verified" if result.head_verified
                else "DSpark heads NOT verified")
    c = result.content
    if c is None:
        return ""
    parts = [f"{c.hashed_files} files, {c.hashed_bytes:,} bytes in {c.seconds:.1f} s"]
    if c.against_blob_name:
        parts.append(f"{c.against_blob_name} blobs vs their names")
    if c.against_manifest:
        parts.append(f"{c.against_manifest} vs the manifest")
    return "; ".join(parts)


def render(result: CheckpointResult, console: Console | None = None) -> None:
    from rich.table import Table

    if console is None:
        console = output()
    summary = Table(title=f"dspark verify-checkpoint {result.path}", title_justify="left")
    summary.add_column("check")
    summary.add_column("result")
    summary.add_column("detail")
    for check in result.checks:
        bad = result.problems_of(check)
        shown = f"[red]FAILED ({result.count_of(bad):,})[/red]" if bad else "[green]passed[/green]"
        summary.add_row(check.value, shown, _detail(result, check))
    if not result.dspark:
        summary.add_row("head", "not checked", "config.json declares no DSpark draft")
    if Check.content not in result.checks:
        summary.add_row("content", "not hashed", "--hash, --manifest FILE or --write-manifest")
    console.print(summary)
    if result.problems:
        problems = Table(title="problems", title_justify="left", show_lines=True)
        for column in ("code", "subject", "expected", "actual", "what to do"):
            problems.add_column(column, overflow="fold")
        for p in result.problems:
            problems.add_row(p.code, p.subject, p.expected, p.actual, p.hint)
        console.print(problems)
        console.print(f"[red]FAILED[/red]: {result.count_of(result.problems):,} problem(s).")
    else:
        console.print("[green]OK[/green]: every check passed.")
