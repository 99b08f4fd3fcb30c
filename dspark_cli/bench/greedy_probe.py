"""A cell's lossless probe: the pinned prompts sent one at a time, greedily (temperature 0, a
fixed max_tokens), to the cell's server after the measured phase, so its counters are read
before. One at a time: every answer is a batch of one, the same shape on every arm. The
answers' token ids come from vLLM's `return_token_ids`; `lossless.py` compares them."""

from __future__ import annotations

from typing import Any

import httpx

from dspark_cli.bench.lossless import PromptSet


def answer(client: httpx.Client, base_url: str, model: str, prompts: PromptSet,
           timeout_s: float) -> dict[str, Any]:
    """The record's `lossless` section: the settings it ran with, every answer's text and (when
    the server returns them for all) token ids, and the first error if a request failed; asked
    through the cell's session's `client`."""
    spec = prompts.spec
    texts: list[str] = []
    ids: list[list[int] | None] = []
    errors: list[str] = []
    for i, prompt in enumerate(prompts.prompts):
        body = {"model": model, "prompt": prompt, "max_tokens": spec.max_tokens,
                "temperature": 0.0, "top_p": 1.0, "seed": 0, "return_token_ids": True}
        try:
            response = client.post(f"{base_url}/v1/completions", json=body,
                                   timeout=timeout_s)
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
