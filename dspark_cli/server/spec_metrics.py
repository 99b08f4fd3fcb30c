"""What the verify steps of a set of requests show: whether verification proposed fewer than K
tokens in some steps (trimming). Read from the launch as `dspark serve` starts it, nothing
added: from vLLM's per-request speculative-decoding metrics where the server reports them (its
own config asks for them, serve's launch too), else from the growth of vLLM's /metrics
spec-decode counters over the same requests (`observed`).

With `--per-request-spec-decode-metrics {summary,detailed}` (vLLM 0.32, "experimental, shape
may change") a completion of one sequence carries `metrics.speculative_decoding`:
`num_spec_steps`, `num_draft_tokens`, `num_accepted_draft_tokens`, `num_spec_tokens` (K) and
the accepted-count histogram; `detailed` adds the ordered `per_step_drafted` and
`per_step_accepted`. A fixed-K drafter proposes K in every step; adaptive verification trims,
so its steps propose fewer. A response is untrusted input: a field of the wrong type, a count
out of range or arrays that disagree with the totals make the answer malformed (`ValueError`),
never a number.

Public API: `parse(body)` -> `RequestSteps | None`; `observed(answers, problems, counters,
k)` -> `Engagement`; `judge(engagement, expected)` -> `Judgement`; `expected_of(...)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dspark_cli.server.metrics import SpecDecode

ADAPTIVE, FIXED, AT_MOST = "adaptive", "fixed_k", "at_most_k"  # what the launch expects
# Where the steps were read (`Engagement.level`).
PER_REQUEST = "per-request metrics the server reports"
COUNTERS = "/metrics spec-decode counters"
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


def parse(body: Any) -> RequestSteps | None:
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
                "trimmed_tokens": self.trimmed_tokens}


def observed(answers: Sequence[RequestSteps | None], problems: Sequence[str],
             counters: SpecDecode | None, k: int | None) -> Engagement:
    """The steps of a set of requests: their own per-request metrics where the server reports
    them, else the /metrics counters' growth over them (`counters`; None: unreadable, or the
    server drafts nothing). vLLM counts every verify step as one draft of K slots."""
    if problems or any(a is not None for a in answers):
        return Engagement.of(PER_REQUEST, answers, problems)
    n = len(answers)
    if counters is None:
        return Engagement(None, n, 0, 0, 0, 0, k, None,
                          why="no spec-decode counters on /metrics around the requests")
    return Engagement(COUNTERS, n, n if counters.drafts else 0, counters.drafts,
                      counters.draft_tokens, counters.accepted, k, None)


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
    than K; fixed K: none did)."""
    if e.problems:
        return Judgement(NOT_MEASURED, False, "malformed per-request metrics: "
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
    shown = (f"{short} ({e.draft_tokens} draft tokens, {e.accepted} accepted, "
             f"{e.reported} requests; {e.level})")
    if expected == ADAPTIVE:
        return (Judgement(TRIMMED, True, f"adaptive verification trimmed: {shown}") if trimmed
                else Judgement(FULL_K, None, f"adaptive verification is configured, but no "
                               f"step was trimmed: {shown}; vLLM 0.32 counts the drafts it "
                               "scheduled, not those verification kept, so this cannot show "
                               "trimming and credits none (docs/smoke.md)"))
    if expected == FIXED and trimmed:
        return Judgement(UNEXPECTED, False, f"a fixed-K drafter proposed fewer than K: {shown}")
    return Judgement(TRIMMED if trimmed else FULL_K, True, shown)
