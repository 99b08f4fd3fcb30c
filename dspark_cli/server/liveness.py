"""The stall watch: a server whose `/health` answers 200 while its requests generate nothing.

vLLM (and its forks) can stop decoding with requests still running and `/health` still 200;
nothing in the server says so, and a benchmark then waits out its load generator's timeout
(hours). This watch reads `/metrics` every `poll_s`: per engine (label `engine`), the running
and waiting requests (gauges `vllm:num_requests_running` / `vllm:num_requests_waiting`) and the
generated tokens (counter `vllm:generation_tokens`). An engine with requests in it whose token
counter has not grown for `stall_s` seconds has stalled; the watch then trips once, keeping the
evidence (the counters, when tokens last grew). An engine with nothing in it never stalls, and a
`/metrics` that cannot be read is not a stall (the session's other watches judge a dead
server).

    watch = StallWatch(client, lambda: url, StallSettings(stall_s=90)).start()
    watch.tripped        # the Stall, or None
    watch.stop()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dspark_cli.server.http import exchange

if TYPE_CHECKING:  # imported where a request is made: a dry run loads no HTTP stack
    import httpx

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
GENERATED = "vllm:generation_tokens_total"
ALL_ENGINES = "all"  # the key of series that carry no `engine` label


@dataclass(frozen=True)
class StallSettings:
    """`watch.stall_s` (seconds without a generated token while requests are in the engine;
    0 or null: off) and `watch.poll_s` (how often `/metrics` is read)."""

    stall_s: float
    poll_s: float = 2.0
    timeout_s: float = 5.0  # each /metrics read

    @property
    def enabled(self) -> bool:
        return self.stall_s > 0


@dataclass(frozen=True)
class EngineSample:
    """One engine's gauges and token counter in one `/metrics` read."""

    running: float = 0.0
    waiting: float = 0.0
    generated: float = 0.0

    @property
    def busy(self) -> bool:
        return self.running > 0 or self.waiting > 0


def read_sample(text: str) -> dict[str, EngineSample]:
    """Per engine, its running/waiting requests and generated tokens from exposition text;
    ValueError when the text is not Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    seen: dict[str, dict[str, float]] = {}
    keys = {RUNNING: "running", WAITING: "waiting", GENERATED: "generated"}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = keys.get(sample.name)
            if key is None:
                continue
            engine = sample.labels.get("engine", ALL_ENGINES)
            values = seen.setdefault(engine, {})
            values[key] = values.get(key, 0.0) + float(sample.value)
    return {engine: EngineSample(**values) for engine, values in seen.items()}


def fetch(client: httpx.Client, base_url: str,
          timeout_s: float) -> dict[str, EngineSample] | None:
    """`/metrics` now, per engine, through `client`; None when it cannot be read or parsed."""
    import httpx

    try:
        response = exchange(client, "GET", base_url.rstrip("/") + "/metrics",
                            deadline_s=timeout_s)
        response.raise_for_status()
        return read_sample(response.text)
    except (httpx.HTTPError, ValueError):
        return None


@dataclass(frozen=True)
class Stall:
    """Why the watch tripped: which engine, for how long, and the counters it saw."""

    engine: str
    seconds: float  # since its token counter last grew
    stall_s: float
    running: float
    waiting: float
    generated: float
    at: float  # time.time() when it tripped
    engines: Mapping[str, EngineSample] = field(default_factory=dict)

    @property
    def reason(self) -> str:
        where = "" if self.engine == ALL_ENGINES else f" on engine {self.engine}"
        return (f"stalled: no token generated for {self.seconds:.3g} s{where} while "
                f"{self.running:g} requests ran and {self.waiting:g} waited "
                f"({RUNNING} {self.running:g}, {WAITING} {self.waiting:g}, "
                f"{GENERATED} {self.generated:g}; watch.stall_s={self.stall_s:g})")

    def to_dict(self) -> dict[str, Any]:
        return {"reason": "stalled", "sentence": self.reason, "engine": self.engine,
                "seconds_without_token": round(self.seconds, 1), "stall_s": self.stall_s,
                "running": self.running, "waiting": self.waiting,
                "generation_tokens": self.generated,
                "tripped_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at)),
                "engines": {e: vars(s) for e, s in self.engines.items()}}


class StallTracker:
    """The watch's judgement over successive reads (pure: the clock is passed in)."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self._last: dict[str, tuple[float, float]] = {}  # engine -> (tokens, since when)

    def observe(self, engines: Mapping[str, EngineSample], now: float) -> Stall | None:
        """Take one read at monotonic `now`; the first stalled engine, or None."""
        for engine, sample in sorted(engines.items()):
            tokens, since = self._last.get(engine, (sample.generated, now))
            if sample.generated != tokens or not sample.busy:
                since = now  # tokens grew, or nothing to generate: the clock restarts
            self._last[engine] = (sample.generated, since)
            if sample.busy and now - since >= self.stall_s:
                return Stall(engine, now - since, self.stall_s, sample.running, sample.waiting,
                             sample.generated, time.time(), dict(engines))
        return None


class StallWatch:
    """Reads `/metrics` in a daemon thread and trips once (`tripped`, `fired`) on a stall.
    `url()` gives the server's base URL now (None: not known yet); `client` is its session's."""

    def __init__(self, client: httpx.Client, url: Callable[[], str | None],
                 settings: StallSettings,
                 on_trip: Callable[[Stall], None] | None = None) -> None:
        self.settings = settings
        self._client, self._url, self._on_trip = client, url, on_trip
        self._tracker = StallTracker(settings.stall_s)
        self.fired = threading.Event()
        self.tripped: Stall | None = None
        self.reads = 0  # successful /metrics reads so far
        self._cleared_by: Stall | None = None  # rearmed: the stall that must clear first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dspark-stallwatch", daemon=True)

    def start(self) -> StallWatch:
        self._thread.start()
        return self

    def stop(self) -> Stall | None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.settings.timeout_s + 1.0)
        return self.tripped

    def rearm(self) -> None:
        """Watch for the next stall (a foreground server that keeps running after one), once
        this one has cleared: its engine generated again or has nothing left to run."""
        self._cleared_by = self.tripped
        self.tripped = None
        self.fired.clear()

    def _run(self) -> None:
        while not self._stop.wait(self.settings.poll_s):
            if self.tripped is not None:
                continue
            url = self._url()
            engines = fetch(self._client, url, self.settings.timeout_s) if url else None
            if engines is None:
                continue
            self.reads += 1
            old = self._cleared_by
            if old is not None:
                now = engines.get(old.engine)
                if now is not None and now.busy and now.generated == old.generated:
                    continue  # the same stall goes on: said once
                self._cleared_by, self._tracker = None, StallTracker(self.settings.stall_s)
            stall = self._tracker.observe(engines, time.monotonic())
            if stall is not None:
                self.tripped = stall
                self.fired.set()
                if self._on_trip is not None:
                    self._on_trip(stall)



def settings_of(stall_s: float | None, poll_s: float) -> StallSettings | None:
    """The stall watch `watch.stall_s` / `watch.poll_s` ask for (None: stall_s 0 or null)."""
    return StallSettings(float(stall_s), float(poll_s)) if stall_s else None
