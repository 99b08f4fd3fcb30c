"""Goodput: the throughput of the requests that met the protocol's latency objectives (pure).

DistServe's definition, as `vllm bench serve --goodput` counts it: a request is good when its
TTFT, TPOT ((latency - TTFT) / (output tokens - 1), 0 for one token) and end-to-end latency are
each within its objective. vLLM reports only good requests per second; the share of good
requests and the output tokens/s they carried come from the same result file's per-request
arrays (`ttfts`, `latencies`, `output_lens`, `errors`), so the two agree by construction and
the record keeps vLLM's number beside dspark's. The objective is met when at least
`percentile` % of the measured requests were good (e.g. "p99 TTFT within 2 s").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dspark_cli.bench import stats

if TYPE_CHECKING:  # the records' readers (report) need no schema
    from dspark_cli.config.bench import ObjectivesConf

METRICS = ("ttft", "tpot", "e2el")  # vLLM's --goodput keys


@dataclass(frozen=True)
class Objectives:
    """Per-request latency limits in ms (None: not an objective) and the attainment asked."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None
    percentile: float = 99.0

    @property
    def limits(self) -> dict[str, float]:
        return {m: v for m in METRICS if (v := getattr(self, f"{m}_ms")) is not None}

    def to_dict(self) -> dict[str, Any]:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2el_ms": self.e2el_ms,
                "percentile": self.percentile}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Objectives | None:
        """A record's objectives (its numbers' types checked by the reader); None when it names
        no limit; ValueError when a limit is not above 0 or the percentile not in (0, 100]."""
        if not data:
            return None
        limits = {m: None if (v := data.get(f"{m}_ms")) is None else float(v) for m in METRICS}
        percentile = float(data.get("percentile", 99.0))
        if any(v is not None and v <= 0 for v in limits.values()) or not 0 < percentile <= 100:
            raise ValueError(f"objectives {dict(data)!r} are no latency limits")
        if all(v is None for v in limits.values()):
            return None
        return cls(limits["ttft"], limits["tpot"], limits["e2el"], percentile)

    def words(self) -> str:
        """"p99 of requests within TTFT 2000 ms, TPOT 80 ms"."""
        limits = ", ".join(f"{m.upper()} {v:g} ms" for m, v in self.limits.items())
        return f"p{self.percentile:g} of requests within {limits}"


def objectives(conf: ObjectivesConf) -> Objectives | None:
    """The protocol's objectives from `bench.objectives` (ranges checked by the schema); None
    when it names no limit."""
    if conf.ttft_ms is None and conf.tpot_ms is None and conf.e2el_ms is None:
        return None
    return Objectives(conf.ttft_ms, conf.tpot_ms, conf.e2el_ms, conf.percentile)


def loadgen_flags(obj: Objectives | None) -> list[str]:
    """`--goodput ttft:MS tpot:MS e2el:MS`: vLLM's own count of the good requests, and
    `--save-detailed`: the per-request arrays the share is counted from."""
    if obj is None:
        return []
    return ["--goodput", *(f"{m}:{v:g}" for m, v in obj.limits.items()), "--save-detailed"]


@dataclass(frozen=True)
class Goodput:
    """One measured phase under the objectives."""

    requests: int  # the phase's requests, failed ones included (they are not good)
    good: int
    request_goodput: float  # good requests per second
    output_goodput: float  # the good requests' output tokens per second
    vllm_request_goodput: float | None  # vLLM's own number, for the record
    met: bool  # share >= percentile / 100

    @property
    def share(self) -> float:
        return self.good / self.requests if self.requests else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "good": self.good, "share": round(self.share, 4),
                "request_goodput": round(self.request_goodput, 4),
                "output_goodput": round(self.output_goodput, 4),
                "vllm_request_goodput": self.vllm_request_goodput, "met": self.met}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], obj: Objectives | None = None) -> Goodput:
        """A recorded goodput, `met` recomputed from its counts and `obj`'s percentile (a
        record's own `met` is a claim, never read: `"met": "false"` is no boolean, and an edited
        `true` would outvote the counts); ValueError/TypeError/KeyError when it is not one."""
        vllm = data.get("vllm_request_goodput")
        requests, good = data["requests"], data["good"]
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (requests, good)):
            raise ValueError(f"goodput: {good!r} good of {requests!r} requests are no counts")
        if not 0 <= good <= requests:
            raise ValueError(f"goodput: {good} good of {requests} requests")
        percentile = obj.percentile if obj is not None else 100.0
        return cls(requests, good, float(data["request_goodput"]),
                   float(data["output_goodput"]), None if vllm is None else float(vllm),
                   meets(good, requests, percentile))


def _tpot(latency: float, ttft: float, tokens: int) -> float:
    return (latency - ttft) / (tokens - 1) if tokens > 1 else 0.0


def measure(result: Mapping[str, Any], obj: Objectives) -> Goodput | None:
    """Goodput of a `vllm bench serve` result file; None when it lacks the per-request arrays."""
    arrays: list[Any] = [result.get(k) for k in ("ttfts", "latencies", "output_lens")]
    duration = result.get("duration")
    if not all(isinstance(a, list) for a in arrays) or not isinstance(duration, int | float) \
            or duration <= 0 or len({len(a) for a in arrays}) != 1:
        return None
    ttfts, latencies, lens = arrays
    errors = result["errors"] if isinstance(result.get("errors"), list) else [""] * len(lens)
    limits = {m: v / 1000 for m, v in obj.limits.items()}  # vLLM's arrays are seconds
    good, tokens = 0, 0
    for ttft, latency, n, err in zip(ttfts, latencies, lens, errors, strict=False):
        if err or not isinstance(n, int) or n <= 0:
            continue
        seen = {"ttft": ttft, "tpot": _tpot(latency, ttft, n), "e2el": latency}
        if all(seen[m] <= limit for m, limit in limits.items()):
            good += 1
            tokens += n
    vllm = result.get("request_goodput")
    return Goodput(len(lens), good, good / duration, tokens / duration,
                   float(vllm) if isinstance(vllm, int | float) else None,
                   meets(good, len(lens), obj.percentile))


def meets(good: int, requests: int, percentile: float) -> bool:
    """Whether `good` of `requests` met the objective: at least `percentile`% of them (a phase
    without requests met nothing)."""
    return requests > 0 and good >= percentile / 100 * requests


@dataclass(frozen=True)
class GoodputResult:
    """One arm at one concurrency over its valid repeats' goodput."""

    values: tuple[float, ...]  # output goodput per valid repeat, in repeat order
    output_goodput: stats.Interval
    share: stats.Interval
    met: int  # how many of the repeats met the objective

    def to_dict(self) -> dict[str, Any]:
        return {"output_goodputs": list(self.values),
                "output_goodput": self.output_goodput.to_dict(), "share": self.share.to_dict(),
                "met": self.met, "repeats": len(self.values)}


def aggregate(recorded: Sequence[Goodput | None]) -> GoodputResult | None:
    """Mean goodput and share with their t intervals, like throughput; None without any."""
    present = [g for g in recorded if g is not None]
    if not present:
        return None
    values = tuple(g.output_goodput for g in present)
    return GoodputResult(values, stats.mean_interval(values),
                         stats.mean_interval([g.share for g in present]),
                         sum(g.met for g in present))
