"""smoke over several data parallel engines: the requests go out at once, the generation check
counts all of them, and the `engines` check passes only when every engine's own counter grew."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dspark_cli.config import smoke as smoke_schema
from dspark_cli.server.metrics import engine_tokens, parse
from dspark_cli.smoke.checks import (
    Boot,
    Observations,
    RequestOutcome,
    RequestState,
    check_engines,
    check_generation,
)
from dspark_cli.smoke.expectations import Expectations, expectations
from dspark_cli.status import Status
from tests.conftest import compose_typed


def exp(engines: int) -> Expectations:
    smoke_schema.register()
    cfg = compose_typed(["+hw=cpu", "speculative=none"], config="smoke")
    return replace(expectations(cfg), engines=engines)


def metrics(**per_engine: float) -> str:
    lines = ["# TYPE vllm:generation_tokens counter"]
    for engine, value in per_engine.items():
        lines += [f'vllm:generation_tokens_total{{engine="{engine[1:]}",model_name="tiny"}} '
                  f"{value}",
                  f'vllm:generation_tokens_created{{engine="{engine[1:]}",model_name="tiny"}} '
                  "1.7e9"]
    return "\n".join(lines) + "\n"


def observed(tokens: int, before: str, after: str) -> Observations:
    return Observations(managed=True, boot=Boot(True, 1.0),
                        request=RequestOutcome(RequestState.ok, 0.5, 200, tokens),
                        metrics_before=parse(before), metrics_after=parse(after))


def test_one_engine_sends_one_request_and_skips_the_engines_check() -> None:
    e = exp(1)
    assert e.requests == 1
    obs = observed(48, metrics(e0=0), metrics(e0=48))
    assert check_engines(e, obs).status is Status.skipped
    assert check_generation(e, obs).status is Status.passed


@pytest.mark.parametrize("engines", [2, 3])
def test_several_engines_send_two_requests_each(engines: int) -> None:
    assert exp(engines).requests == 2 * engines


def test_both_engines_grew_passes_with_each_engines_count() -> None:
    e = exp(2)
    obs = observed(4 * 48, metrics(e0=10, e1=5), metrics(e0=10 + 96, e1=5 + 96))
    result = check_engines(e, obs)
    assert result.status is Status.passed, result.evidence
    assert result.data["generation_tokens"] == {"0": 96, "1": 96}
    assert "engine 0 +96, engine 1 +96" in result.evidence
    gen = check_generation(e, obs)
    assert gen.status is Status.passed and gen.data["requested"] == 4 * 48, gen.evidence


def test_an_engine_that_generated_nothing_fails_naming_it() -> None:
    e = exp(2)
    obs = observed(4 * 48, metrics(e0=0, e1=7), metrics(e0=192, e1=7))
    result = check_engines(e, obs)
    assert result.status is Status.failed
    assert result.evidence.startswith("engines 1 generated nothing")


def test_an_engine_missing_from_metrics_fails() -> None:
    """A DP size of 2 whose /metrics shows one engine: the other never came up to serve."""
    result = check_engines(exp(2), observed(192, metrics(e0=0), metrics(e0=192)))
    assert result.status is Status.failed and result.data["generation_tokens"]["1"] == 0


def test_generation_counts_every_request() -> None:
    """Four requests of 48: usage and the counter must both say 192."""
    e = exp(2)
    short = check_generation(e, observed(48, metrics(e0=0, e1=0), metrics(e0=24, e1=24)))
    assert short.status is Status.failed and short.data["requested"] == 192


def test_engine_tokens_reads_totals_per_engine_not_created_stamps() -> None:
    assert engine_tokens(parse(metrics(e0=3, e1=4))) == {"0": 3, "1": 4}
