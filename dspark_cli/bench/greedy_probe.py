"""A cell's lossless probe: the pinned prompts sent one at a time, greedily (temperature 0, a
fixed max_tokens), to the cell's server after the measured phase, so its counters are read
before. One at a time: every answer is a batch of one, the same shape on every arm. The
answers' token ids come from vLLM's `return_token_ids`; `lossless.py` compares them. Each
request is waited for under the session's watches (`watched`): a server whose engine stalls
while /health answers 200 ends the probe when the stall watch trips, not at its HTTP timeout."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import httpx

from dspark_cli.bench.lossless import PromptSet

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
    spec = prompts.spec
    texts: list[str] = []
    ids: list[list[int] | None] = []
    errors: list[str] = []
    for i, prompt in enumerate(prompts.prompts):
        body = {"model": model, "prompt": prompt, "max_tokens": spec.max_tokens,
                "temperature": 0.0, "top_p": 1.0, "seed": 0, "return_token_ids": True}
        try:
            response = watched(partial(client.post, f"{base_url}/v1/completions", json=body,
                                       timeout=timeout_s), stop)
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
