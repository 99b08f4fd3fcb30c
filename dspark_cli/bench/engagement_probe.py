"""A cell's engagement probe: after the measured phase (its counters already read), as many
completions at once as the cell's concurrency, so the server batches them as under the load,
sampled as the protocol samples (at most MAX_TOKENS each: enough verify steps). Their steps,
read from the launch as `dspark serve` starts it (per-request metrics where the server reports
them, else /metrics' spec-decode counters around the probe: `metrics.observed`), say
whether verification trimmed: what the cell's record keeps as `engagement`, beside the DSpark
draft's parameter count against its pin (`draft_params`). Waited for under the session's
watches (`lossless.watched`): a stalled engine ends it at once, not at its HTTP timeout."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from dspark_cli.bench.lossless import Stopped, watched
from dspark_cli.bench.protocol import Sampling
from dspark_cli.server.metrics import (
    Engagement,
    RequestSteps,
    Scrape,
    judge,
    observed,
    request_steps,
    spec_decode,
)

# The prompts when the protocol has no pinned greedy prompts to reuse.
PROMPTS = ("Speculative decoding drafts tokens that the target model verifies.",)
MAX_REQUESTS = 64  # a probe at concurrency 256 sends 64: enough steps, minutes saved
MAX_TOKENS = 256


def _one(client: httpx.Client, url: str, body: dict[str, Any],
         timeout_s: float) -> RequestSteps | str | None:
    """One answer's steps (None: it carried none), or why it could not be read."""
    try:
        response = client.post(url, json=body, timeout=timeout_s)
        response.raise_for_status()
        return request_steps(response.json())
    except httpx.HTTPStatusError as exc:
        return f"HTTP {exc.response.status_code}"
    except (httpx.HTTPError, ValueError) as exc:
        return " ".join(f"{type(exc).__name__}: {exc}".split())


def probe(client: httpx.Client, base_url: str, model: str, prompts: Sequence[str], concurrency: int,
          sampling: Sampling, timeout_s: float, k: int | None,
          scrape: Callable[[], Scrape | None],
          stop: Callable[[], str | None] = lambda: None) -> Engagement:
    """`concurrency` (at most MAX_REQUESTS) completions at once through the cell's session's
    `client`, sampled as `sampling` says; `scrape` reads /metrics (None when it cannot) before
    and after them. Not measured, with the reason, when `stop()` names one before they are all
    answered (a stall)."""
    count = max(1, min(concurrency, MAX_REQUESTS))
    bodies = [{"model": model, "prompt": prompts[i % len(prompts)], "ignore_eos": True,
               "max_tokens": min(sampling.max_output_tokens, MAX_TOKENS),
               "temperature": sampling.temperature, "top_p": sampling.top_p}
              for i in range(count)]
    before = scrape()
    pool = ThreadPoolExecutor(count)
    try:
        answers = watched(lambda: list(pool.map(
            lambda b: _one(client, f"{base_url}/v1/completions", b, timeout_s), bodies)), stop)
    finally:  # a stalled server's requests end with its teardown: no wait for them here
        pool.shutdown(wait=False, cancel_futures=True)
    if isinstance(answers, Stopped):
        return Engagement(None, 0, 0, 0, 0, 0, k, None,
                          why=f"the probe was given up: {answers.reason}")
    after = scrape()
    counters = None if before is None or after is None else spec_decode(after.delta(before))
    return observed([a for a in answers if not isinstance(a, str)],
                    [a for a in answers if isinstance(a, str)], counters, k)


def record(seen: Engagement | None, expected: str | None) -> dict[str, Any]:
    """The cell's `engagement` section: what was expected, what the steps showed, and the
    outcome (`trimmed`, `full_k`, `unexpected_trim`, `not_measured`) with `ok`."""
    if seen is None:
        seen = Engagement(None, 0, 0, 0, 0, 0, None, None,
                          why="the cell ended before its probe")
    verdict = judge(seen, expected)
    return {**seen.to_dict(), "expected": expected, "outcome": verdict.outcome,
            "ok": verdict.ok, "sentence": verdict.sentence}
