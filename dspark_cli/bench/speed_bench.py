"""SPEED-Bench's release (nvidia/SPEED-Bench: rows of question_id, category, turns, ...) into the
request file the seed protocol reads: `<dir>/<subset>.jsonl`, one row per request with the
`messages` vLLM's speed_bench loader takes the prompt from, and its SHA-256 to pin.

The release is read from a local copy (no hub access is assumed): a directory (a `huggingface-cli
download nvidia/SPEED-Bench --repo-type dataset` snapshot, or NVIDIA's prepare.py output) or one
file, JSONL or Parquet (Parquet needs pyarrow). A row is either a release row (`turns`: the
user turns, the first is the prompt) or a prepared one (`messages`). The public release holds
placeholder text for prompts whose licence keeps them at their source; such a set is refused
(its numbers would measure the sentinel), unless `drop_placeholders` keeps the complete rows
only, which is then a different set with its own pin.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dspark_cli.bench.dataset import SPEED_BENCH_PREPARE, SPEED_BENCH_SENTINEL
from dspark_cli.errors import CheckFailed, DsparkError, ExitCode, UsageError
from dspark_cli.untrusted import write_atomic

SUBSETS = ("qualitative", "throughput_1k", "throughput_2k", "throughput_8k", "throughput_16k",
           "throughput_32k")
_MAX_LINE = 16 << 20  # bytes of one JSONL row (a 32k-token prompt is well under 1 MiB)
_KEPT = ("question_id", "category", "sub_category", "difficulty", "source", "src_id")


class NeedsPyarrow(DsparkError):
    exit_code = ExitCode.MISSING_ENGINE


@dataclass(frozen=True)
class Prepared:
    out: Path
    rows: int
    dropped: int  # placeholder rows left out (drop_placeholders)
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "out": str(self.out)}


def _files(source: Path, subset: str) -> list[Path]:
    """The release's files of `subset`: the file given, or under a directory `<subset>.jsonl`,
    `<subset>/*.parquet|*.jsonl` or `*<subset>*.parquet|jsonl` (sorted: shard order)."""
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise UsageError(f"{source} does not exist: give the local copy of the SPEED-Bench "
                         "release (a directory or a .jsonl/.parquet file).")
    for pattern in (f"{subset}.jsonl", f"{subset}/*.parquet", f"{subset}/*.jsonl",
                    f"*/{subset}/*.parquet", f"*{subset}*.parquet", f"*{subset}*.jsonl"):
        found = sorted(p for p in source.glob(pattern) if p.is_file())
        if found:
            return found
    raise UsageError(f"{source} holds no {subset} rows ({subset}.jsonl, {subset}/*.parquet or "
                     f"a file named after {subset}).")


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open("rb") as f:
        for number, raw in enumerate(iter(lambda: f.readline(_MAX_LINE + 1), b""), start=1):
            where = f"{path} line {number}"
            if len(raw) > _MAX_LINE:
                raise CheckFailed(f"{where} is longer than {_MAX_LINE} bytes: not a row.")
            if not raw.strip():
                continue
            try:
                yield where, json.loads(raw)
            except ValueError as e:
                raise CheckFailed(f"{where} is not JSON ({e}).") from None


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise NeedsPyarrow(f"{path} is Parquet, and reading it needs pyarrow, which this Python "
                           "cannot import.", hint="pip install pyarrow (or give the rows as "
                           "JSONL)") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow's errors have no common base but Exception
        raise CheckFailed(f"{path} cannot be read as Parquet ({e}).") from None
    for number, row in enumerate(table.to_pylist(), start=1):
        yield f"{path} row {number}", row


def _prompt(where: str, row: Any) -> str:
    """The request's prompt: the first user turn of a release row, or a prepared row's first
    message."""
    if not isinstance(row, dict):
        raise CheckFailed(f"{where} is not a JSON object.")
    turns = row.get("turns")
    if isinstance(turns, list) and turns and isinstance(turns[0], str):
        return turns[0]
    messages = row.get("messages")
    if (isinstance(messages, list) and messages and isinstance(messages[0], dict)
            and isinstance(messages[0].get("content"), str)):
        return messages[0]["content"]
    raise CheckFailed(f"{where} has neither `turns` (a list of strings: SPEED-Bench's release) "
                      "nor `messages` (a list of {role, content}: a prepared row).")


def request_rows(source: Path, subset: str) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """(where, request row) per release row, in order; None for a placeholder row."""
    for path in _files(source, subset):
        rows = _parquet_rows(path) if path.suffix == ".parquet" else _jsonl_rows(path)
        for where, row in rows:
            prompt = _prompt(where, row)
            if SPEED_BENCH_SENTINEL in prompt:
                yield where, None
                continue
            kept = {k: row[k] for k in _KEPT if isinstance(row.get(k), str | int)}
            yield where, {**kept, "messages": [{"role": "user", "content": prompt}]}


def prepare(source: Path, subset: str, out: Path, drop_placeholders: bool = False) -> Prepared:
    """Write the request file (atomically, never through a link) and return its pin."""
    if subset not in SUBSETS:
        raise UsageError(f"unknown SPEED-Bench subset {subset!r}; one of {', '.join(SUBSETS)}.")
    if out.exists() and source.exists() and out.resolve() == source.resolve():
        raise UsageError(f"{out} is the source itself: write the request file elsewhere.")
    lines, dropped, first_placeholder = [], 0, None
    for where, row in request_rows(source, subset):
        if row is None:
            dropped += 1
            first_placeholder = first_placeholder or where
            continue
        lines.append(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    if dropped and not drop_placeholders:
        raise CheckFailed(
            f"{dropped} of {dropped + len(lines)} {subset} rows are SPEED-Bench's placeholders "
            f"(first: {first_placeholder}): the public release leaves those prompts at their "
            "sources.", hint=f"fetch them with NVIDIA's {SPEED_BENCH_PREPARE} and give its "
            "output here, or --drop-placeholders to keep the complete rows only (another set, "
            "with its own pin)")
    if not lines:
        raise CheckFailed(f"no {subset} request in {source}.")
    data = "".join(lines).encode("utf-8")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, data)
    return Prepared(out, len(lines), dropped, hashlib.sha256(data).hexdigest())
