"""The frozen request set: a SPEED-Bench split or a JSONL file, pinned by its SHA-256.

A benchmark number means something only for the requests that produced it, so a file-backed
set must match its pin byte for byte, and SPEED-Bench's public placeholder rows (which carry a
sentinel instead of prompts) are refused. `random` prompts come from vLLM's seeded generator
and have no file to pin.

What a cell's requests were, so its acceptance says where it came from (pure).

Acceptance depends on the data: random-token prompts inflate position-0 acceptance, and
chat-templated prompts differ from raw text (InferenceX requires chat-templated data for
speculative decoding). vLLM's `vllm bench serve` applies the tokenizer's chat template to a
custom or SPEED-Bench request file unless `--skip-chat-template` is passed
(benchmarks/datasets/datasets.py); its random prompts are token ids drawn at random.

A protocol's inputs, checked before the first boot (`checked_inputs`, `input_findings`): the
request set against its pin and the lossless probe's pinned prompts. A real run stops on the
first problem (exit 2 or 1); a dry run reports each as a finding, so it says what the real run
would refuse.

SPEED-Bench's release (nvidia/SPEED-Bench: rows of question_id, category, turns, ...) into the
request file the seed protocol reads (`prepare`): `<dir>/<subset>.jsonl`, one row per request
with the `messages` vLLM's speed_bench loader takes the prompt from, and its SHA-256 to pin.
The release is read from a local copy (no hub access is assumed): a directory (a
`huggingface-cli download nvidia/SPEED-Bench --repo-type dataset` snapshot, or NVIDIA's
prepare.py output) or one file, JSONL or Parquet (Parquet needs pyarrow). A row is either a
release row (`turns`: the user turns, the first is the prompt) or a prepared one (`messages`).
The public release holds placeholder text for prompts whose licence keeps them at their source;
such a set is refused (its numbers would measure the sentinel), unless `drop_placeholders`
keeps the complete rows only, which is then a different set with its own pin."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.bench.lossless import PromptSet, load_prompts
from dspark_cli.bench.protocol import Protocol
from dspark_cli.errors import CheckFailed, DsparkError, ExitCode, UsageError
from dspark_cli.status import Finding, Status
from dspark_cli.untrusted import output_dir, shown_path, write_atomic

if TYPE_CHECKING:  # the records' readers (report) need no schema
    from dspark_cli.config.bench import DatasetConf

SPEED_BENCH_SENTINEL = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
SPEED_BENCH_PREPARE = (
    "https://raw.githubusercontent.com/NVIDIA-NeMo/Skills/refs/heads/main/"
    "nemo_skills/dataset/speed-bench/prepare.py"
)
# The key each row must carry for vLLM's loader of that kind.
_ROW_KEY = {"speed_bench": "messages", "jsonl": "prompt"}


@dataclass(frozen=True)
class DatasetSpec:
    kind: str  # speed_bench | jsonl | random
    path: Path | None
    subset: str | None
    sha256: str | None
    input_tokens: int | None
    seed: int

    @property
    def request_file(self) -> Path | None:
        """The file whose bytes are the request set (None for random prompts)."""
        if self.kind == "speed_bench":
            assert self.path is not None and self.subset is not None
            return self.path / f"{self.subset}.jsonl"
        return self.path if self.kind == "jsonl" else None


@dataclass(frozen=True)
class VerifiedDataset:
    spec: DatasetSpec
    sha256: str | None
    rows: int | None


def dataset_spec(dataset: DatasetConf, base_dir: Path) -> DatasetSpec:
    """The request set `bench.dataset` names (its pin's form and its lengths checked by the
    schema); relative paths are from `base_dir`; UsageError when a kind lacks what it needs."""
    kind = str(dataset.kind)
    path = None if dataset.path is None else (base_dir / dataset.path).resolve()
    spec = DatasetSpec(kind=kind, path=path, subset=dataset.subset,
                       sha256=None if dataset.sha256 is None else dataset.sha256.lower(),
                       input_tokens=dataset.input_tokens, seed=dataset.seed)
    if kind in ("speed_bench", "jsonl") and path is None:
        raise UsageError(f"bench.dataset.kind={kind} needs bench.dataset.path.")
    if kind == "speed_bench" and not spec.subset:
        raise UsageError(
            "bench.dataset.kind=speed_bench needs bench.dataset.subset (e.g. throughput_1k)."
        )
    if kind == "random" and spec.input_tokens is None:
        raise UsageError("bench.dataset.kind=random needs bench.dataset.input_tokens > 0.")
    return spec


def verify(spec: DatasetSpec, needed_rows: int) -> VerifiedDataset:
    """Hash the request file, check its rows, and refuse a mismatch or placeholder prompts.

    Reads the file once, line by line, so a large split costs one sequential read.
    """
    file = spec.request_file
    if file is None:
        return VerifiedDataset(spec, None, None)
    if not file.is_file():
        hint = (
            "make it from a local copy of the SPEED-Bench release with `dspark prepare "
            f"speed-bench SRC --subset {spec.subset} --out {file.parent}` (docs/bench.md)"
            if spec.kind == "speed_bench"
            else "Set bench.dataset.path to an existing JSONL file."
        )
        raise UsageError(f"Request set {file} does not exist.", hint=hint)
    digest = hashlib.sha256()
    rows = 0
    key = _ROW_KEY[spec.kind]
    with file.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            digest.update(raw)
            if not raw.strip():
                continue
            text = raw.decode("utf-8", errors="replace")
            if SPEED_BENCH_SENTINEL in text:
                raise CheckFailed(
                    f"Request set {file} holds SPEED-Bench's placeholder prompts (line "
                    f"{line_no}: {SPEED_BENCH_SENTINEL!r}), not the benchmark's data.",
                    hint=f"Rebuild the real prompts with {SPEED_BENCH_PREPARE}.",
                )
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                raise CheckFailed(f"Request set {file} line {line_no} is not JSON: {exc}.") from exc
            if not isinstance(row, dict) or key not in row:
                raise CheckFailed(
                    f"Request set {file} line {line_no} has no {key!r} field, which vLLM's "
                    f"{spec.kind} loader needs."
                )
            rows += 1
    actual = digest.hexdigest()
    if spec.sha256 is None:
        raise UsageError(
            f"Request set {file} is not pinned: a benchmark on an unpinned request set cannot "
            f"be compared with another. Its SHA-256 is {actual}.",
            hint=f"If this is the set you mean, pin it: bench.dataset.sha256={actual}",
        )
    if actual != spec.sha256:
        raise CheckFailed(
            f"Request set {file} has SHA-256 {actual}, but the protocol pins {spec.sha256}: it "
            "is not the frozen request set.",
            hint="Restore the pinned file, or pin the new one on purpose with "
            f"bench.dataset.sha256={actual}",
        )
    if rows < needed_rows:
        raise UsageError(
            f"Request set {file} has {rows} requests but a phase of the protocol sends "
            f"{needed_rows}: vLLM would repeat requests.",
            hint="Lower bench.measured_prompts or use a larger request set.",
        )
    return VerifiedDataset(spec, actual, rows)


SKIP_CHAT_TEMPLATE = "--skip-chat-template"


def describe(dataset: VerifiedDataset, argv: Sequence[str]) -> dict[str, Any]:
    """The request set's name, SHA-256, rows and whether its prompts were chat-templated or
    random tokens, as the measured phase's command line (`argv`) sent them."""
    spec = dataset.spec
    random_tokens = spec.kind == "random"
    name = (f"random ({spec.input_tokens} input tokens, seed {spec.seed})" if random_tokens
            else f"speed_bench/{spec.subset}" if spec.kind == "speed_bench"
            else spec.request_file.name if spec.request_file is not None else spec.kind)
    templated = not random_tokens and SKIP_CHAT_TEMPLATE not in argv
    how = "chat-templated by the load generator" if templated else "raw text"
    sentence = ("random token ids: position-0 acceptance is inflated, not what real prompts "
                "give" if random_tokens else f"{name}, {how}, SHA-256 {dataset.sha256}")
    return {"name": name, "kind": spec.kind, "sha256": dataset.sha256, "rows": dataset.rows,
            "chat_templated": templated, "random_tokens": random_tokens, "sentence": sentence}


REQUESTS_RULE, PROMPTS_RULE = "bench-request-set", "bench-lossless-prompts"


@dataclass(frozen=True)
class Inputs:
    dataset: VerifiedDataset
    prompts: PromptSet | None


def needed_rows(protocol: Protocol) -> int:
    """The most requests one phase sends: the request set must hold at least as many."""
    return max(p.num_prompts for c in protocol.cells for p in c.phases)


def checked_inputs(protocol: Protocol, dataset: DatasetSpec) -> Inputs:
    """Both inputs verified; the first problem raised as the run's error."""
    verified = verify(dataset, needed_rows(protocol))
    return Inputs(verified, None if protocol.lossless is None else load_prompts(protocol.lossless))


def input_findings(protocol: Protocol, dataset: DatasetSpec) -> tuple[Finding, ...]:
    """Each input's verdict as a preflight finding (a dry run's)."""
    found = []
    try:
        verified = verify(dataset, needed_rows(protocol))
        what = ("random prompts: no file to pin" if verified.sha256 is None else
                f"{verified.rows} requests, sha256 {verified.sha256} as pinned")
        found.append(Finding(REQUESTS_RULE, Status.passed, what, "bench.dataset"))
    except DsparkError as e:
        hint = f" ({e.hint})" if e.hint else ""
        found.append(Finding(REQUESTS_RULE, Status.failed, e.message + hint, "bench.dataset"))
    if protocol.lossless is not None:
        try:
            load_prompts(protocol.lossless)
            found.append(Finding(PROMPTS_RULE, Status.passed, "the pinned greedy prompts",
                                 "bench.lossless"))
        except DsparkError as e:
            found.append(Finding(PROMPTS_RULE, Status.failed, e.message, "bench.lossless"))
    return tuple(found)


SUBSETS = ("qualitative", "throughput_1k", "throughput_2k", "throughput_8k", "throughput_16k",
           "throughput_32k")
_MAX_LINE = 16 << 20  # bytes of one JSONL row (a 32k-token prompt is well under 1 MiB)
_KEPT = ("question_id", "category", "sub_category", "difficulty", "source", "src_id")
_PARQUET_MAGIC = b"PAR1"  # a Parquet file's first and last four bytes


class NeedsPyarrow(DsparkError):
    exit_code = ExitCode.MISSING_ENGINE


class BadSource(UsageError):
    """A release file prepare cannot take as it is (exit 2): the file (and line) and why."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where} {problem}; nothing was written.")


@dataclass(frozen=True)
class Prepared:
    out: Path
    rows: int
    dropped: int  # placeholder rows left out (drop_placeholders)
    sha256: str
    repeated: int = 0  # requests whose prompt an earlier request already sends
    first_repeat: str | None = None  # where the first such request is

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "out": str(self.out)}


def _regular(path: Path, source: Path) -> Path:
    """`path` when it is a regular file that stays inside `source` (a directory given: a link
    out of it would make the pin cover a file nobody asked for); BadSource otherwise."""
    shown = shown_path(path)
    if source.is_dir() and not path.resolve().is_relative_to(source.resolve()):
        raise BadSource(shown, f"is a link out of {shown_path(source)} (to "
                        f"{shown_path(path.resolve())}): refused")
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise BadSource(shown, f"cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        raise BadSource(shown, "is not a regular file (a FIFO, a socket or a device): refused")
    return path


def _files(source: Path, subset: str) -> list[Path]:
    """The release's files of `subset`: the file given, or under a directory `<subset>.jsonl`,
    `<subset>/*.parquet|*.jsonl` or `*<subset>*.parquet|jsonl` (sorted: shard order)."""
    if not source.is_dir() and (source.exists() or source.is_symlink()):
        return [_regular(source, source)]
    if not source.is_dir():
        raise UsageError(f"{shown_path(source)} does not exist: give the local copy of the "
                         "SPEED-Bench release (a directory or a .jsonl/.parquet file).")
    for pattern in (f"{subset}.jsonl", f"{subset}/*.parquet", f"{subset}/*.jsonl",
                    f"*/{subset}/*.parquet", f"*{subset}*.parquet", f"*{subset}*.jsonl"):
        found = sorted(p for p in source.glob(pattern) if not p.is_dir())
        if found:
            return [_regular(p, source) for p in found]
    raise UsageError(f"{shown_path(source)} holds no {subset} rows ({subset}.jsonl, "
                     f"{subset}/*.parquet or a file named after {subset}).")


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open("rb") as f:
        for number, raw in enumerate(iter(lambda: f.readline(_MAX_LINE + 1), b""), start=1):
            where = f"{shown_path(path)} line {number}"
            if len(raw) > _MAX_LINE:
                raise BadSource(where, f"is longer than {_MAX_LINE} bytes: not a row")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise BadSource(where, f"is not UTF-8 (byte 0x{raw[e.start]:02x} at column "
                                f"{e.start + 1})") from None
            if not text.strip():
                continue
            try:
                yield where, json.loads(text)
            except RecursionError:
                raise BadSource(where, "nests deeper than a JSON reader goes: not a row") from None
            except ValueError as e:
                raise BadSource(where, f"is not JSON ({e})") from None


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open("rb") as f:
        head = f.read(4)
        f.seek(max(path.stat().st_size - 4, 0))
        tail = f.read(4)
    if head != _PARQUET_MAGIC or tail != _PARQUET_MAGIC:
        raise BadSource(shown_path(path), "is not Parquet (no PAR1 at its start and end: "
                        "truncated or another format)")
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise NeedsPyarrow(f"{shown_path(path)} is Parquet, and reading it needs pyarrow, which "
                           "this Python cannot import.", hint="pip install pyarrow (or give "
                           "the rows as JSONL)") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow's errors have no common base but Exception
        raise BadSource(shown_path(path), f"cannot be read as Parquet ({e})") from None
    for number, row in enumerate(table.to_pylist(), start=1):
        yield f"{shown_path(path)} row {number}", row


def _prompt(where: str, row: Any) -> str:
    """The request's prompt: the first user turn of a release row, or a prepared row's first
    message."""
    if not isinstance(row, dict):
        raise BadSource(where, "is not a JSON object")
    turns = row.get("turns")
    if isinstance(turns, list) and turns and isinstance(turns[0], str):
        return turns[0]
    messages = row.get("messages")
    if (isinstance(messages, list) and messages and isinstance(messages[0], dict)
            and isinstance(messages[0].get("content"), str)):
        return messages[0]["content"]
    raise BadSource(where, "has neither `turns` (a list of strings: SPEED-Bench's release) "
                    "nor `messages` (a list of {role, content}: a prepared row)")


def request_rows(source: Path, subset: str) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """(where, request row) per release row, in order; None for a placeholder row."""
    for path in _files(source, subset):
        rows = _parquet_rows(path) if path.suffix == ".parquet" else _jsonl_rows(path)
        empty = True
        for where, row in rows:
            empty = False
            prompt = _prompt(where, row)
            if SPEED_BENCH_SENTINEL in prompt:
                yield where, None
                continue
            kept = {k: row[k] for k in _KEPT if isinstance(row.get(k), str | int)}
            yield where, {**kept, "messages": [{"role": "user", "content": prompt}]}
        if empty:
            raise BadSource(shown_path(path), "holds no row (an empty file: an interrupted "
                            "download?)")


def _check_out(out: Path, source: Path, inputs: Sequence[Path]) -> None:
    """UsageError when the request file would replace what it is made from: the source, or
    any release file read (by its name or through a link)."""
    target = out.resolve()
    for given in (source, *inputs):
        if target == given.resolve() or (out.exists() and given.exists()
                                         and os.path.samefile(out, given)):
            raise UsageError(f"the request file {shown_path(out)} would replace "
                             f"{shown_path(given)}, which it is made from: refused, nothing "
                             "was written.", hint="give --out another directory")


def prepare(source: Path, subset: str, out: Path, drop_placeholders: bool = False) -> Prepared:
    """Write the request file (atomically, never through a link, never over a file it reads)
    and return its pin."""
    if subset not in SUBSETS:
        raise UsageError(f"unknown SPEED-Bench subset {subset!r}; one of {', '.join(SUBSETS)}.")
    _check_out(out, source, _files(source, subset))
    lines, dropped, first_placeholder = [], 0, None
    seen: dict[str, str] = {}
    repeated, first_repeat = 0, None
    for where, row in request_rows(source, subset):
        if row is None:
            dropped += 1
            first_placeholder = first_placeholder or where
            continue
        line = json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n"
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as e:
            raise BadSource(where, f"holds a lone surrogate ({line[e.start]!r}), which is no "
                            "text: not a prompt") from None
        prompt = row["messages"][0]["content"]
        if prompt in seen:
            repeated += 1
            first_repeat = first_repeat or f"{where} repeats {seen[prompt]}"
        else:
            seen[prompt] = where
        lines.append(line)
    if dropped and not drop_placeholders:
        raise UsageError(
            f"{dropped} of {dropped + len(lines)} {subset} rows are SPEED-Bench's placeholders "
            f"(first: {first_placeholder}): the public release leaves those prompts at their "
            "sources; nothing was written.", hint=f"fetch them with NVIDIA's "
            f"{SPEED_BENCH_PREPARE} and give its output here, or --drop-placeholders to keep the "
            "complete rows only (another set, with its own pin)")
    if not lines:
        raise UsageError(f"no {subset} request in {shown_path(source)} (every row is a "
                         "placeholder); nothing was written.")
    data = "".join(lines).encode("utf-8")
    output_dir(out.parent)
    write_atomic(out, data)
    return Prepared(out, len(lines), dropped, hashlib.sha256(data).hexdigest(), repeated,
                    first_repeat)
