"""Whether a cell's number may be reported (pure): the report's rules, checked every time.

A cell is valid only when the client and the server agree on how many tokens were generated
in the measured phase, nothing was preempted, no request failed, the server log shows no
fatal line, and (where the protocol checks it) its greedy answers are the reference arm's
(`lossless.py`). An invalid cell keeps all its reasons and never enters an average or a speedup.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Evidence:
    """What a cell observed; None where it could not be observed (that alone is a reason)."""

    num_prompts: int
    completed: int | None = None
    failed: int | None = None
    client_output_tokens: int | None = None
    server_generation_tokens: float | None = None  # delta over the measured phase
    preemptions: float | None = None  # delta over the measured phase
    fatal_lines: tuple[str, ...] = ()  # "pattern: line"
    errors: tuple[str, ...] = ()  # a phase or the server that failed outright
    lossless: str | None = None  # why the greedy answers fail the lossless check


def judge(ev: Evidence) -> tuple[str, ...]:
    """Every broken rule, in a stable order; empty means valid."""
    reasons = list(ev.errors)
    if ev.completed is None:
        reasons.append("no load-generator result for the measured phase")
    else:
        if ev.failed:
            reasons.append(f"{ev.failed} of {ev.num_prompts} requests failed")
        if ev.completed != ev.num_prompts:
            reasons.append(f"{ev.completed} of {ev.num_prompts} requests completed")
    if ev.server_generation_tokens is None or ev.preemptions is None:
        reasons.append("server counters (/metrics) unavailable around the measured phase")
    else:
        if ev.client_output_tokens is not None and round(ev.server_generation_tokens) != (
            ev.client_output_tokens
        ):
            reasons.append(
                f"client counted {ev.client_output_tokens} generated tokens, server "
                f"{round(ev.server_generation_tokens)} (vllm:generation_tokens_total delta)"
            )
        if ev.preemptions:
            reasons.append(
                f"{round(ev.preemptions)} preemptions (vllm:num_preemptions_total delta)"
            )
    reasons.extend(f"fatal server log line: {line}" for line in ev.fatal_lines)
    if ev.lossless:
        reasons.append(ev.lossless)
    return tuple(reasons)
