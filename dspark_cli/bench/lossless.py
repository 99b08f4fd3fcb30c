"""Lossless at temperature 0 (pure but for reading the pinned prompt file): with correct
verification every speculative method gives the target model's own greedy tokens, so every arm
answers the same pinned prompts greedily and its tokens are compared, token for token, with
the reference arm's (no speculation). A cell whose share of identical sequences falls below
`bench.lossless.min_identical` is invalid.

A cell's record keeps its answers (`lossless.texts`, and `lossless.token_ids` where the server
returns them: vLLM's `return_token_ids`; text is compared only when ids are missing) and its
comparison with the reference arm's earliest cell; the summary compares again from the
records, so a reference that ran later still counts.

A cell's lossless probe: the pinned prompts sent one at a time, greedily (temperature 0, a
fixed max_tokens), to the cell's server after the measured phase, so its counters are read
before. One at a time: every answer is a batch of one, the same shape on every arm. The
answers' token ids come from vLLM's `return_token_ids`; `compare` above compares them. Each
request is waited for under the session's watches (`watched`): a server whose engine stalls
while /health answers 200 ends the probe when the stall watch trips, not at its HTTP timeout."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

from dspark_cli.errors import UsageError
from dspark_cli.paths import conf_dir
from dspark_cli.server.http import exchange

if TYPE_CHECKING:  # the records' readers (report) need no schema; a dry run, no HTTP client
    import httpx

    from dspark_cli.config.bench import LosslessConf

Output = Sequence[int] | str  # token ids, or text compared by character


@dataclass(frozen=True)
class LosslessSpec:
    """`bench.lossless`: the pinned prompts, how long each greedy answer is, the reference arm
    and the share of identical sequences a cell needs."""

    prompts: Path
    sha256: str
    max_tokens: int
    reference: str
    min_identical: float


@dataclass(frozen=True)
class PromptSet:
    spec: LosslessSpec
    prompts: tuple[str, ...]


def lossless_spec(conf: LosslessConf, arms: Sequence[str]) -> LosslessSpec | None:
    """The protocol's lossless check (None when disabled); UsageError when the prompt file is
    not pinned or the reference is no arm (the schema has checked the ranges)."""
    if not conf.enabled:
        return None
    where = "bench.lossless"
    if not conf.sha256:
        raise UsageError(f"{where}.sha256 is not set: the greedy prompt file must be pinned.",
                         hint=f"Set {where}.sha256 to the file's SHA-256, or "
                         f"{where}.enabled=false to skip the lossless check.")
    if conf.reference not in arms:
        raise UsageError(f"{where}.reference {conf.reference!r} is not one of bench.arms "
                         f"{list(arms)}: the greedy tokens need an arm without speculation.",
                         hint=f"Add {conf.reference!r} to bench.arms, or set "
                         f"{where}.enabled=false.")
    path = Path(conf.prompts)
    return LosslessSpec(path if path.is_absolute() else conf_dir() / path, conf.sha256.lower(),
                        conf.max_tokens, conf.reference, conf.min_identical)


def load_prompts(spec: LosslessSpec) -> PromptSet:
    """The pinned prompts (JSONL, `{"prompt": ...}` a line); UsageError if the file is missing,
    is not that, or its SHA-256 is not the pin."""
    try:
        data = spec.prompts.read_bytes()
    except OSError as exc:
        raise UsageError(f"Cannot read the greedy prompt file {spec.prompts}: {exc}.") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != spec.sha256:
        raise UsageError(f"The greedy prompt file {spec.prompts} has SHA-256 {actual}, not the "
                         f"pinned {spec.sha256}.",
                         hint="Restore the file, or pin the new one in bench.lossless.sha256.")
    try:
        rows = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        prompts = tuple(str(r["prompt"]) for r in rows)
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{spec.prompts} is not JSONL of {{\"prompt\": ...}}: {exc}.") from None
    if not prompts:
        raise UsageError(f"{spec.prompts} holds no prompt.")
    return PromptSet(spec, prompts)


def first_divergence(a: Output, b: Output) -> int | None:
    """The first index (token, or character for text) where two answers differ; None if equal."""
    if list(a) == list(b):
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


@dataclass(frozen=True)
class Comparison:
    """One cell's greedy answers against the reference cell's."""

    reference_cell: str
    compared_by: str  # "token_ids" or "text"
    identical: int
    total: int
    divergences: tuple[tuple[int, int], ...]  # (prompt index, first differing index)

    @property
    def share(self) -> float:
        return self.identical / self.total if self.total else 0.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Comparison | None:
        if not data:
            return None
        return cls(str(data["reference_cell"]), str(data["compared_by"]),
                   int(data["identical"]), int(data["total"]),
                   tuple((int(d["prompt"]), int(d["index"])) for d in data["divergences"]))

    def to_dict(self) -> dict[str, Any]:
        return {"reference_cell": self.reference_cell, "compared_by": self.compared_by,
                "identical": self.identical, "total": self.total,
                "share": round(self.share, 4),
                "divergences": [{"prompt": p, "index": i} for p, i in self.divergences]}


def _complete(lossless: Mapping[str, Any] | None) -> TypeGuard[Mapping[str, Any]]:
    """Whether a recorded probe answered every prompt."""
    return lossless is not None and not lossless.get("errors") and bool(lossless.get("texts"))


def compare(reference_cell: str, reference: Mapping[str, Any],
            mine: Mapping[str, Any]) -> Comparison | None:
    """`mine` against `reference` (both a record's `lossless`); None when either is missing.
    Token ids are compared where both have them, else the text."""
    if not (_complete(reference) and _complete(mine)) \
            or len(reference["texts"]) != len(mine["texts"]):
        return None
    by_ids = bool(reference.get("token_ids")) and bool(mine.get("token_ids"))
    key = "token_ids" if by_ids else "texts"
    pairs = list(zip(reference[key], mine[key], strict=True))
    divergences = tuple((i, d) for i, (a, b) in enumerate(pairs)
                        if (d := first_divergence(a, b)) is not None)
    return Comparison(reference_cell, "token_ids" if by_ids else "text",
                      len(pairs) - len(divergences), len(pairs), divergences)


def lossless_reason(comparison: Comparison | None, lossless: Mapping[str, Any]) -> str | None:
    """Why a cell fails the check (below the share it needs, or no answers), or None."""
    if lossless.get("errors"):
        return f"lossless probe failed: {lossless['errors'][0]}"
    if comparison is None:
        return None  # no reference to compare with (yet)
    need = float(lossless.get("min_identical", 1.0))
    if comparison.share >= need:
        return None
    unit = "token" if comparison.compared_by == "token_ids" else "character"
    p, i = comparison.divergences[0]
    return (f"lossless: {comparison.identical} of {comparison.total} greedy sequences identical "
            f"to {lossless.get('reference')}'s ({comparison.reference_cell}), "
            f"{comparison.share:.0%} < {need:.0%}; first divergence at {unit} {i} of prompt {p}")


def reference_record(cells: Sequence[tuple[str, str, Mapping[str, Any] | None]],
                     reference: str) -> tuple[str, Mapping[str, Any]] | None:
    """The reference arm's earliest cell (of `cells`, (cell id, arm, lossless) in protocol
    order) whose probe answered every prompt."""
    return next(((cid, lossless) for cid, arm, lossless in cells
                 if arm == reference and _complete(lossless)), None)


def by_arm(cells: Sequence[tuple[str, str, Mapping[str, Any] | None, Mapping[str, Any] | None]],
           arms: Sequence[str]) -> list[dict[str, Any]]:
    """The lossless table: per arm (of `cells`: (arm, cell id, its answers, their comparison)),
    the sequences identical to the reference's over its compared cells, the cells below the
    share they need, and the first divergence seen."""
    table = []
    for arm in arms:
        mine = [(cid, ans, chk) for a, cid, ans, chk in cells if a == arm and ans]
        if not mine:
            continue
        checked = [(cid, ans, chk) for cid, ans, chk in mine if chk]
        identical = sum(int(chk["identical"]) for _, _, chk in checked)
        total = sum(int(chk["total"]) for _, _, chk in checked)
        first = next(({"cell": cid, **chk["divergences"][0]} for cid, _, chk in checked
                      if chk["divergences"]), None)
        table.append({
            "arm": arm, "reference": mine[0][1].get("reference"),
            "compared_by": "/".join(sorted({str(chk["compared_by"]) for _, _, chk in checked}))
            or None,
            "cells": len(checked), "unchecked": len(mine) - len(checked),
            "probe_failed": sum(bool(ans.get("errors")) for _, ans, _ in mine),
            "identical": identical, "total": total,
            "share": round(identical / total, 4) if total else None,
            "min_identical": mine[0][1].get("min_identical"),
            "below": [cid for cid, ans, chk in checked
                      if chk["identical"] < float(ans.get("min_identical", 1.0)) * chk["total"]],
            "first_divergence": first})
    return table


T = TypeVar("T")
WATCH_POLL_S = 0.2  # how often a probe waiting on its server asks why it should stop


@dataclass(frozen=True)
class Stopped:
    """A probe's wait given up: `reason` is the session's (`ServerSession.stop_reason`)."""

    reason: str


def watched(work: Callable[[], T], stop: Callable[[], str | None]) -> T | Stopped:
    """`work()` (requests to the server) in a thread of its own, waited for while `stop()`
    names no reason: a stalled engine, a fatal log line or a dead server ends the wait at once.
    The thread, blocked on a server that no longer answers, ends when the server is torn down;
    an exception `work` raised is raised here."""
    done: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as exc:  # handed to the waiting thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="dspark-probe", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(WATCH_POLL_S)
        reason = stop() if thread.is_alive() else None
        if reason:
            return Stopped(reason)
    if failed:
        raise failed[0]
    return done[0]


def answer(client: httpx.Client, base_url: str, model: str, prompts: PromptSet,
           timeout_s: float, stop: Callable[[], str | None] = lambda: None) -> dict[str, Any]:
    """The record's `lossless` section: the settings it ran with, every answer's text and (when
    the server returns them for all) token ids, and the first error if a request failed or
    `stop()` named a reason to give up on the server (the stall watch tripped); asked through
    the cell's session's `client`."""
    import httpx

    spec = prompts.spec
    texts: list[str] = []
    ids: list[list[int] | None] = []
    errors: list[str] = []
    for i, prompt in enumerate(prompts.prompts):
        body = {"model": model, "prompt": prompt, "max_tokens": spec.max_tokens,
                "temperature": 0.0, "top_p": 1.0, "seed": 0, "return_token_ids": True}
        try:
            response = watched(partial(exchange, client, "POST", f"{base_url}/v1/completions",
                                       json=body, deadline_s=timeout_s), stop)
            if isinstance(response, Stopped):
                errors.append(" ".join(f"prompt {i}: {response.reason}".split()))
                break
            response.raise_for_status()
            choice = response.json()["choices"][0]
            texts.append(str(choice["text"]))
        except httpx.HTTPStatusError as exc:
            errors.append(f"prompt {i}: HTTP {exc.response.status_code}")
            break
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            # one line: a reason is a table cell in the summary and the report
            errors.append(" ".join(f"prompt {i}: {type(exc).__name__}: {exc}".split()))
            break
        got = choice.get("token_ids")
        ids.append([int(t) for t in got] if isinstance(got, list) else None)
    have_ids = bool(ids) and all(t is not None for t in ids)
    return {"prompts": str(spec.prompts), "prompts_sha256": spec.sha256,
            "max_tokens": spec.max_tokens, "reference": spec.reference,
            "min_identical": spec.min_identical, "texts": texts,
            "token_ids": ids if have_ids else None, "errors": errors}
