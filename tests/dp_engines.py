"""For the multi-node deploy tests: drive completions at a data-parallel deployment until every
engine has generated, and say how much each did (from its own `/metrics`)."""

from __future__ import annotations

import concurrent.futures

import httpx

from dspark_cli.server.metrics import GENERATION_TOKENS, scrape

ROUNDS = 6  # bounded: at most ROUNDS x PARALLEL requests
PARALLEL = 4


def complete(base_url: str, model: str, max_tokens: int = 8) -> int:
    """One completion; the number of tokens the server says it generated."""
    r = httpx.post(f"{base_url}/v1/completions", timeout=120,
                   json={"model": model, "prompt": "one two three", "max_tokens": max_tokens,
                         "temperature": 0, "ignore_eos": True})
    r.raise_for_status()
    return int(r.json()["usage"]["completion_tokens"])


def per_engine_generation(base_url: str, model: str, engines: int = 2) -> dict[str, float]:
    """Generation tokens per `engine` label since the call began, after sending rounds of
    parallel completions until each of `engines` engines has generated (or ROUNDS pass)."""
    before = scrape(base_url)
    grown: dict[str, float] = {}
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        for _ in range(ROUNDS):
            tokens = list(pool.map(lambda _: complete(base_url, model), range(PARALLEL)))
            assert tokens == [8] * PARALLEL
            delta = scrape(base_url).delta(before)
            grown = {e: v for e, v in delta.by_label(GENERATION_TOKENS, "engine").items()
                     if v > 0}
            if len(grown) >= engines:
                break
    return grown
