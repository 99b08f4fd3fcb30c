"""The metrics: a vLLM server's Prometheus counters (scrape, parse, sum, diff) and what the
verify steps of a set of requests show.

vLLM exposes every counter twice: `<name>_total` (the count) and `<name>_created` (a Unix
timestamp). Summing a whole family picks up the timestamp and inflates the count by ~1.7e9, a
mistake seen in the wild, so everything here works on `_total` samples only, summed over labels
(`engine`, `model_name`, ...) unless a label filter narrows them.

    scrape(client, base_url) -> Scrape  GET /metrics and parse it
    parse(text) -> Scrape               parse exposition text (pure)
    Scrape.total(name, **labels)        sum of `<name>_total` samples matching the labels
    Scrape.by_label(name, label)        `<name>_total` split by one label's values
    Scrape.delta(earlier) -> Scrape     counter increase between two scrapes
    spec_decode(scrape) -> SpecDecode | None
    engine_tokens(scrape) -> {engine: generated tokens}

The verify steps say whether verification proposed fewer than K tokens in some steps
(trimming). Read from the launch as `dspark serve` starts it, nothing added: from vLLM's
per-request speculative-decoding metrics where the server reports them (its own config asks for
them, serve's launch too), else from the growth of the /metrics spec-decode counters over the
same requests (`observed`). With `--per-request-spec-decode-metrics {summary,detailed}` (vLLM
0.32, "experimental, shape may change") a completion of one sequence carries
`metrics.speculative_decoding`: `num_spec_steps`, `num_draft_tokens`,
`num_accepted_draft_tokens`, `num_spec_tokens` (K) and the accepted-count histogram; `detailed`
adds the ordered `per_step_drafted` and `per_step_accepted`. A fixed-K drafter proposes K in
every step; adaptive verification trims, so its steps propose fewer. A response is untrusted
input: a field of the wrong type, a count out of range or arrays that disagree with the totals
make the answer malformed (`ValueError`), never a number.

vLLM 0.28 (the first with adaptive verification) has no per-request metrics, and its counters
count the drafts the scheduler scheduled (K a step, trimmed or not: v1/core/sched/scheduler.py
`num_draft_tokens = len(scheduled_spec_token_ids)`); a slot verification left out is counted
rejected. So the counters show trimming only for a draft the launch pins as exact
(`model.expected.draft_exact`: it proposes its target's own greedy tokens, as the tiny Qwen3
pair does): on greedy requests every slot verified is accepted, so the slots kept per step are
the accepted prefix, and the per-position acceptance counts give each step's verify width
(`EXACT_COUNTERS`, `Engagement.widths`).

    request_steps(body) -> RequestSteps | None
    observed(answers, problems, counters, k) -> Engagement
    judge(engagement, expected) -> Judgement; expected_of(...)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from dspark_cli.server.http import exchange

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

    def as_dict(self) -> dict[str, Any]:
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
                    _check_counter(sample.name, sample.labels, sample.value)
                    key = (sample.name, frozenset(sample.labels.items()))
                    samples[key] = samples.get(key, 0.0) + sample.value
    except ValueError as exc:
        raise ScrapeError(f"/metrics is not valid Prometheus text: {exc}") from exc
    return Scrape(samples)


def _check_counter(name: str, labels: Mapping[str, str], value: float) -> None:
    """A counter sample that no count can be read from: a value that is not finite, or a
    per-position sample whose `position` is not a plain number."""
    if not math.isfinite(value):
        raise ScrapeError(f"/metrics: {name} is {value}, not a count")
    position = labels.get("position")
    if name == SPEC_ACCEPTED_PER_POS + _TOTAL and position is not None and not (
            position.isascii() and position.isdigit()):
        raise ScrapeError(f"/metrics: {name} has position={position[:40]!r}, not a number")


def scrape(client: httpx.Client, base_url: str, timeout_s: float = 5.0) -> Scrape:
    """GET `<base_url>/metrics` through `client` and parse it; ScrapeError on any HTTP or
    parse failure."""
    import httpx

    url = base_url.rstrip("/") + "/metrics"
    try:
        response = exchange(client, "GET", url, deadline_s=timeout_s)
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


ADAPTIVE, FIXED, AT_MOST = "adaptive", "fixed_k", "at_most_k"  # what the launch expects
# Where the steps were read (`Engagement.level`).
PER_REQUEST = "per-request metrics the server reports"
COUNTERS = "/metrics spec-decode counters"
EXACT_COUNTERS = ("/metrics spec-decode counters of an exact draft (a slot not accepted was "
                  "not verified)")
TRIMMED, FULL_K, UNEXPECTED, NOT_MEASURED = "trimmed", "full_k", "unexpected_trim", "not_measured"


@dataclass(frozen=True)
class RequestSteps:
    """One request's verify steps as vLLM reported them."""

    steps: int
    draft_tokens: int
    accepted: int
    k: int
    short_steps: int | None  # steps that proposed fewer than K (`detailed` only)


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"metrics.speculative_decoding.{key} is {value!r}, not a count")
    return value


def _counts(data: Mapping[str, Any], key: str, length: int) -> list[int] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != length:
        raise ValueError(f"metrics.speculative_decoding.{key} is not a list of {length} counts")
    return [_count({key: v}, key) for v in value]


def request_steps(body: Any) -> RequestSteps | None:
    """The per-request metrics of one completion's JSON body; None when it carries none."""
    metrics = body.get("metrics") if isinstance(body, Mapping) else None
    data = metrics.get("speculative_decoding") if isinstance(metrics, Mapping) else None
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ValueError("metrics.speculative_decoding is not a JSON object")
    steps, drafted, accepted = (_count(data, k) for k in (
        "num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens"))
    k = _count(data, "num_spec_tokens")
    if k == 0 or drafted > steps * k or accepted > drafted:
        raise ValueError(f"metrics.speculative_decoding: {steps} steps of K={k}, {drafted} "
                         f"drafted, {accepted} accepted cannot all hold")
    histogram = _counts(data, "acceptance_histogram", k + 1)
    if histogram is not None and (sum(histogram) != steps or sum(
            j * n for j, n in enumerate(histogram)) != accepted):
        raise ValueError("metrics.speculative_decoding.acceptance_histogram disagrees with "
                         "num_spec_steps or num_accepted_draft_tokens")
    per_drafted = _counts(data, "per_step_drafted", steps)
    per_accepted = _counts(data, "per_step_accepted", steps)
    if (per_drafted is None) != (per_accepted is None):
        raise ValueError("metrics.speculative_decoding has one per-step array without the other")
    short = None
    if per_drafted is not None and per_accepted is not None:
        if (sum(per_drafted) != drafted or sum(per_accepted) != accepted
                or any(a > d or d > k for a, d in zip(per_accepted, per_drafted, strict=True))):
            raise ValueError("metrics.speculative_decoding's per-step arrays disagree with its "
                             "totals or with K")
        short = sum(1 for d in per_drafted if d < k)
    return RequestSteps(steps, drafted, accepted, k, short)


@dataclass(frozen=True)
class Engagement:
    """What the per-request metrics of a set of answers showed (a smoke's request, a cell's
    probe). `level` is what was asked of vLLM (None: not asked, and `why` says why)."""

    level: str | None
    requests: int  # answers read
    reported: int  # answers that carried per-request metrics
    steps: int
    draft_tokens: int
    accepted: int
    k: int | None
    short_steps: int | None  # steps proposing fewer than K; None without per-step arrays
    problems: tuple[str, ...] = ()  # malformed answers
    why: str = ""
    # steps that verified 0 .. K draft slots (an exact draft's counters); None: not known
    widths: tuple[int, ...] | None = None

    @property
    def trimmed_tokens(self) -> int:
        """Draft slots the steps left out: steps x K - proposed."""
        return 0 if self.k is None else self.steps * self.k - self.draft_tokens

    @classmethod
    def of(cls, level: str | None, answers: Iterable[RequestSteps | None],
           problems: Sequence[str] = (), why: str = "") -> Engagement:
        seen = list(answers)
        got = [a for a in seen if a is not None]
        ks = {a.k for a in got}
        short = [a.short_steps for a in got]
        return cls(level, len(seen) + len(problems), len(got), sum(a.steps for a in got),
                   sum(a.draft_tokens for a in got), sum(a.accepted for a in got),
                   ks.pop() if len(ks) == 1 else None,
                   sum(s for s in short if s is not None) if got and None not in short else None,
                   tuple(problems) + (("the answers report different K",) if len(ks) > 1
                                      else ()), why)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "problems": list(self.problems),
                "widths": None if self.widths is None else list(self.widths),
                "trimmed_tokens": self.trimmed_tokens}

    def widths_shown(self) -> str:
        """`width: steps` for each verify width seen, e.g. "0: 3, 2: 1, 4: 6"."""
        return ", ".join(f"{w}: {n}" for w, n in enumerate(self.widths or ()) if n)


def verify_widths(drafts: int, accepted_per_position: Sequence[int]) -> tuple[int, ...] | None:
    """Steps that kept 0 .. K slots, from an exact draft's per-position acceptance (a step that
    accepted position i accepted every position before it); None when the counts cannot be
    such prefixes."""
    counts = [drafts, *accepted_per_position, 0]
    if any(a < b or b < 0 for a, b in pairwise(counts)):
        return None
    return tuple(a - b for a, b in pairwise(counts))


def observed(answers: Sequence[RequestSteps | None], problems: Sequence[str],
             counters: SpecDecode | None, k: int | None, exact: bool = False) -> Engagement:
    """The steps of a set of requests: their own per-request metrics where the server reports
    them, else the /metrics counters' growth over them (`counters`; None: unreadable, or the
    server drafts nothing). vLLM counts every verify step as one draft of K slots; for an
    `exact` draft (greedy requests) the accepted slots are the verified ones."""
    if problems or any(a is not None for a in answers):
        return Engagement.of(PER_REQUEST, answers, problems)
    n = len(answers)
    if counters is None:
        return Engagement(None, n, 0, 0, 0, 0, k, None,
                          why="no spec-decode counters on /metrics around the requests")
    reported = n if counters.drafts else 0
    if exact and k and len(counters.accepted_per_position) == k:
        widths = verify_widths(counters.drafts, counters.accepted_per_position)
        if widths is None:
            return Engagement(EXACT_COUNTERS, n, reported, counters.drafts, counters.accepted,
                              counters.accepted, k, None, problems=(
                                  "the per-position acceptance counts "
                                  f"{list(counters.accepted_per_position)} are no prefixes of "
                                  f"{counters.drafts} drafts",))
        return Engagement(EXACT_COUNTERS, n, reported, counters.drafts, counters.accepted,
                          counters.accepted, k, counters.drafts - widths[-1], widths=widths)
    return Engagement(COUNTERS, n, reported, counters.drafts, counters.draft_tokens,
                      counters.accepted, k, None)


@dataclass(frozen=True)
class Judgement:
    """`outcome`: trimmed, full_k, unexpected_trim or not_measured; `ok` whether the
    launch's expectation holds (None: nothing to hold it to); `sentence` for people."""

    outcome: str
    ok: bool | None
    sentence: str


def expected_of(speculative_config: Mapping[str, Any] | None, exact: bool) -> str | None:
    """What the rendered launch expects of the steps: adaptive verification trims, a fixed-K
    drafter proposes K every step, others (ngram) up to K; None without speculation."""
    if not speculative_config:
        return None
    if speculative_config.get("enable_adaptive_verification") is True:
        return ADAPTIVE
    return FIXED if exact else AT_MOST


def judge(e: Engagement, expected: str | None) -> Judgement:
    """Whether the steps show what the launch expects (adaptive: some step proposed fewer
    than K; fixed K: none did). An exact draft's counters can show both ways: adaptive with
    every step at K fails there (it did not engage)."""
    if e.problems:
        return Judgement(NOT_MEASURED, False, ("malformed per-request metrics: "
                                               if e.level != EXACT_COUNTERS else "")
                         + "; ".join(e.problems))
    if e.level is None or expected is None:
        return Judgement(NOT_MEASURED, None, e.why or "no verify steps read")
    if e.reported == 0 or e.steps == 0:
        return Judgement(NOT_MEASURED, False, f"vLLM's {e.level} counted no verify step over "
                         f"{e.requests} requests")
    short = (f"{e.short_steps} of {e.steps} steps proposed fewer than K={e.k}"
             if e.short_steps is not None else
             f"{e.trimmed_tokens} of {e.steps} x K={e.k} draft slots left out")
    trimmed = e.trimmed_tokens > 0
    widths = f"; verify widths (width: steps) {e.widths_shown()}" if e.widths else ""
    shown = (f"{short} ({e.draft_tokens} draft tokens, {e.accepted} accepted, "
             f"{e.reported} requests{widths}; {e.level})")
    if expected == ADAPTIVE and not trimmed and e.level == EXACT_COUNTERS:
        return Judgement(FULL_K, False, "adaptive verification is configured, but every step "
                         f"of the exact draft verified all K slots: {shown}; it did not engage")
    if expected == ADAPTIVE:
        return (Judgement(TRIMMED, True, f"adaptive verification trimmed: {shown}") if trimmed
                else Judgement(FULL_K, None, f"adaptive verification is configured, but no "
                               f"step was trimmed: {shown}; vLLM 0.32 counts the drafts it "
                               "scheduled, not those verification kept, so this cannot show "
                               "trimming and credits none (docs/smoke.md)"))
    if expected == FIXED and trimmed and e.level == EXACT_COUNTERS:
        return Judgement(UNEXPECTED, False, "the draft pinned exact (model.expected.draft_exact) "
                         f"had slots rejected under a fixed K: {shown}")
    if expected == FIXED and trimmed:
        return Judgement(UNEXPECTED, False, f"a fixed-K drafter proposed fewer than K: {shown}")
    return Judgement(TRIMMED if trimmed else FULL_K, True, shown)
