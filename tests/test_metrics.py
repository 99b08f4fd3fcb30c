"""metrics: `_total` only, sums over labels, deltas, spec-decode counters, real HTTP scrapes."""

from __future__ import annotations

import math
import subprocess

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, generate_latest

from dspark_cli.server import metrics
from dspark_cli.server.process import free_port
from tests.conftest import wait_until
from tests.doubles.fake_vllm import command

EXPOSITION = """\
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 48.0
vllm:generation_tokens_total{engine="1",model_name="tiny"} 2.0
# HELP vllm:generation_tokens_created Number of generation tokens processed.
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="tiny"} 1.7596e+09
vllm:generation_tokens_created{engine="1",model_name="tiny"} 1.7596e+09
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 18.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 126.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 29.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="10"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="2"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="tiny",position="0"} 1e9
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
"""


def test_total_ignores_created_and_sums_engines() -> None:
    scrape = metrics.parse(EXPOSITION)
    assert scrape.total(metrics.GENERATION_TOKENS) == 50.0
    assert scrape.total(metrics.GENERATION_TOKENS, engine="1") == 2.0
    assert scrape.total(metrics.GENERATION_TOKENS, engine="7") == 0.0
    assert scrape.total("vllm:num_requests_running") == 0.0  # a gauge is not a counter


def test_spec_decode_reads_the_seed_counters() -> None:
    spec = metrics.spec_decode(metrics.parse(EXPOSITION))
    assert spec is not None
    assert (spec.drafts, spec.draft_tokens, spec.accepted) == (18, 126, 29)
    assert spec.accepted_per_position == (12, 4, 1)  # positions ordered numerically
    assert spec.acceptance_rate == pytest.approx(29 / 126)
    assert spec.mean_acceptance_length == pytest.approx(1 + 29 / 18)
    assert spec.as_dict()["acceptance_rate"] == round(29 / 126, 4)


def test_no_drafter_means_no_spec_counters() -> None:
    text = 'vllm:generation_tokens_total{engine="0"} 5.0\n'
    assert metrics.spec_decode(metrics.parse(text)) is None


def test_zero_drafts_gives_nan_rates_and_null_json() -> None:
    spec = metrics.SpecDecode(0, 0, 0, ())
    assert math.isnan(spec.acceptance_rate) and math.isnan(spec.mean_acceptance_length)
    assert spec.as_dict()["acceptance_rate"] is None


def test_delta_counts_new_series_from_zero() -> None:
    before = metrics.parse('a_total{x="1"} 5\n')
    after = metrics.parse('a_total{x="1"} 8\na_total{x="2"} 4\n')
    delta = after.delta(before)
    assert delta.total("a") == 7.0
    assert delta.by_label("a", "x") == {"1": 3.0, "2": 4.0}


def test_invalid_text_is_a_scrape_error() -> None:
    with pytest.raises(metrics.ScrapeError, match="not valid Prometheus"):
        metrics.parse("vllm:x_total{engine=0 oops\n")


@given(st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=6))
def test_roundtrip_through_prometheus_client(values: list[int]) -> None:
    """Whatever prometheus_client writes (with `_created`), the total is the sum of increments."""
    registry = CollectorRegistry()
    counter = Counter("vllm:generation_tokens", "doc", ["engine"], registry=registry)
    for engine, value in enumerate(values):
        counter.labels(str(engine)).inc(value)
    scrape = metrics.parse(generate_latest(registry).decode())
    assert scrape.total(metrics.GENERATION_TOKENS) == sum(values)


def test_scrape_over_http_and_delta_of_one_request() -> None:
    port = free_port()
    proc = subprocess.Popen(command(port, "healthy", "--k", "3", "--boot-delay", "0"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        def healthy() -> bool:
            try:
                return httpx.get(base + "/health", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(healthy, 10, "the fake server to answer /health")
        before = metrics.scrape(httpx.Client(), base)
        r = httpx.post(base + "/v1/completions",
                       json={"model": "tiny", "prompt": "hi", "max_tokens": 48}, timeout=5)
        assert r.status_code == 200
        delta = metrics.scrape(httpx.Client(), base).delta(before)
        assert delta.total(metrics.GENERATION_TOKENS) == 48
        spec = metrics.spec_decode(delta)
        assert spec is not None and spec.draft_tokens == spec.drafts * 3 > 0
        assert spec.accepted <= spec.draft_tokens
    finally:
        proc.kill()
        proc.wait()


def test_scrape_of_a_closed_port_is_a_scrape_error() -> None:
    with pytest.raises(metrics.ScrapeError, match="could not read"):
        metrics.scrape(httpx.Client(), f"http://127.0.0.1:{free_port()}", timeout_s=1)
