"""Read a vLLM server's Prometheus counters: scrape, parse, sum, diff.

vLLM exposes every counter twice: `<name>_total` (the count) and `<name>_created` (a Unix
timestamp). Summing a whole family picks up the timestamp and inflates the count by ~1.7e9, a
mistake seen in the wild, so everything here works on `_total` samples only, summed over labels
(`engine`, `model_name`, ...) unless a label filter narrows them.

Public API (also used by `dspark bench`):
    scrape(client, base_url) -> Scrape  GET /metrics and parse it
    parse(text) -> Scrape               parse exposition text (pure)
    Scrape.total(name, **labels)        sum of `<name>_total` samples matching the labels
    Scrape.by_label(name, label)        `<name>_total` split by one label's values
    Scrape.delta(earlier) -> Scrape     counter increase between two scrapes
    spec_decode(scrape) -> SpecDecode | None
    engine_tokens(scrape) -> {engine: generated tokens}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where a request is made: a dry run loads no HTTP stack
    import httpx

GENERATION_TOKENS = "vllm:generation_tokens"
PROMPT_TOKENS = "vllm:prompt_tokens"
PREEMPTIONS = "vllm:num_preemptions"
REQUEST_SUCCESS = "vllm:request_success"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"

_TOTAL = "_total"

LabelSet = frozenset[tuple[str, str]]


class ScrapeError(RuntimeError):
    """`/metrics` could not be fetched or parsed; the message says which and why."""


@dataclass(frozen=True)
class Scrape:
    """The `_total` counter samples of one scrape, keyed by (sample name, label set)."""

    samples: Mapping[tuple[str, LabelSet], float]

    def has(self, name: str) -> bool:
        """Whether any `<name>_total` sample is present (spec series exist only with a drafter)."""
        return any(key[0] == name + _TOTAL for key in self.samples)

    def total(self, name: str, **labels: str) -> float:
        """Sum of `<name>_total` over every label set that contains `labels`; 0 when absent."""
        wanted = set(labels.items())
        return sum(
            value
            for (sample, labelset), value in self.samples.items()
            if sample == name + _TOTAL and wanted <= labelset
        )

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """`<name>_total` summed per value of `label` (e.g. per-position acceptance)."""
        out: dict[str, float] = {}
        for (sample, labelset), value in self.samples.items():
            if sample != name + _TOTAL:
                continue
            key = dict(labelset).get(label)
            if key is not None:
                out[key] = out.get(key, 0.0) + value
        return out

    def delta(self, earlier: Scrape) -> Scrape:
        """Increase of every counter since `earlier` (a series new since then counts from 0)."""
        return Scrape(
            {key: value - earlier.samples.get(key, 0.0) for key, value in self.samples.items()}
        )


@dataclass(frozen=True)
class SpecDecode:
    """Speculative-decoding counters (a scrape or a delta of two)."""

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_position: tuple[int, ...]

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens; NaN before any draft."""
        return self.accepted / self.draft_tokens if self.draft_tokens else math.nan

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted / drafts (vLLM's definition: the bonus token counts); NaN before any."""
        return 1 + self.accepted / self.drafts if self.drafts else math.nan

    def as_dict(self) -> dict[str, object]:
        """Plain values for a JSON report (NaN becomes None)."""

        def finite(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 4)

        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted": self.accepted,
            "accepted_per_position": list(self.accepted_per_position),
            "acceptance_rate": finite(self.acceptance_rate),
            "mean_acceptance_length": finite(self.mean_acceptance_length),
        }


def parse(text: str) -> Scrape:
    """Parse Prometheus exposition text, keeping only `_total` samples."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[tuple[str, LabelSet], float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith(_TOTAL):
                    key = (sample.name, frozenset(sample.labels.items()))
                    samples[key] = samples.get(key, 0.0) + sample.value
    except ValueError as exc:
        raise ScrapeError(f"/metrics is not valid Prometheus text: {exc}") from exc
    return Scrape(samples)


def scrape(client: httpx.Client, base_url: str, timeout_s: float = 5.0) -> Scrape:
    """GET `<base_url>/metrics` through `client` and parse it; ScrapeError on any HTTP or
    parse failure."""
    import httpx

    url = base_url.rstrip("/") + "/metrics"
    try:
        response = client.get(url, timeout=timeout_s)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise ScrapeError(f"could not read {url}: {exc}") from exc
    return parse(response.text)


def engine_tokens(scrape_: Scrape) -> dict[str, int]:
    """`vllm:generation_tokens` per data parallel engine (label `engine`)."""
    return {e: round(v) for e, v in scrape_.by_label(GENERATION_TOKENS, "engine").items()}


def spec_decode(scrape_: Scrape) -> SpecDecode | None:
    """The spec-decode counters, or None when the server runs without a drafter."""
    if not scrape_.has(SPEC_DRAFTS):
        return None
    per_pos = scrape_.by_label(SPEC_ACCEPTED_PER_POS, "position")
    positions = sorted(per_pos, key=int)
    return SpecDecode(
        drafts=round(scrape_.total(SPEC_DRAFTS)),
        draft_tokens=round(scrape_.total(SPEC_DRAFT_TOKENS)),
        accepted=round(scrape_.total(SPEC_ACCEPTED)),
        accepted_per_position=tuple(round(per_pos[p]) for p in positions),
    )
