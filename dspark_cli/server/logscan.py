"""The log scan: a server log watched live for fatal lines and for lines that must appear,
the pattern families it matches, and what a finished log says (the cold start's phases, the
DSpark draft's parameter count).

The patterns are data: the config names them (`logs.fatal`, `logs.degraded`, `logs.evidence`,
`logs.fallbacks`: name -> regex, null switched off), compiled once when the config is read (a
broken regex is a usage error, exit 2, naming its key before any server starts); the matching
takes compiled `Pattern`s only. A `LogWatcher` follows the file from its first byte in a
thread, polling every `poll_s` (default 20 ms), so a fatal line is signalled through
`watcher.fired` well within 100 ms of being written, with the lines around it kept for the
report. It also records the first match of each "watch" pattern (required startup lines), with
the regex's named groups.

    scan_lines(lines, fatal, watch) -> LogSnapshot            (pure, for a finished log)
    LogWatcher(path, fatal, watch).start() / .fired / .wait_fatal(t) / .snapshot()
        / .catch_up() / .stop()
    LogSnapshot.upto(n)                                       (what the first n lines showed)
    degraded_lines(snapshot, degraded) -> tuple[str, ...]     ("family: line", first of each)

A cold boot split into the phases its log shows (`read_cold_start`, pure): from the first line
to the engine, the weights loaded, the CUDA graphs captured (adaptive verification profiles its
step costs inside the capture, with no line of its own in vLLM 0.32), the engine ready, the API
ready. Each marker is the line vLLM 0.32 prints (held against its source by
tests/test_cold_start.py) and the time stamp vLLM puts on it (`INFO 12-04 16:01:34`, one-second
resolution); where the line says how long its step took ("Loading weights took 0.01 seconds"),
that is kept too. A marker that does not appear (graphs on CPU or with --enforce-eager) is left
out, and its phase with it.

The DSpark draft's parameter count from its load line ("DSpark draft model loaded: %d
params"), held to the profile's pin (`model.expected.draft_params`: 97 for
DeepSeek-V4-Flash-DSpark; one fewer when the confidence head is missing, which vLLM does not
refuse). The pattern is a log family (`logs.draft_params`); the smoke fails on a mismatch, each
bench cell records what its server printed.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.errors import UsageError

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


@dataclass(frozen=True)
class Match:
    """The first line that matched a watch pattern."""

    pattern: str
    line_no: int
    line: str
    groups: Mapping[str, str | None]


@dataclass(frozen=True)
class FatalEvent:
    """A line that matched a fatal pattern, with its neighbours (the event line included)."""

    pattern: str
    line_no: int
    line: str
    detected_at: float  # time.time() when the watcher saw it
    context: tuple[str, ...]


@dataclass(frozen=True)
class LogSnapshot:
    """What the log showed so far."""

    lines_read: int
    fatal: tuple[FatalEvent, ...]
    found: Mapping[str, Match]
    tail: tuple[str, ...]

    def upto(self, lines: int) -> LogSnapshot:
        """Only what the first `lines` lines showed (events keep their later context lines).

        A verdict is taken at one moment; what the server prints while it is torn down
        afterwards must not change it, but the lines after an event still explain it.
        """
        return LogSnapshot(
            min(self.lines_read, lines),
            tuple(e for e in self.fatal if e.line_no <= lines),
            {k: m for k, m in self.found.items() if m.line_no <= lines},
            self.tail,
        )


@dataclass
class _Pending:
    """A fatal event still collecting the lines after it."""

    pattern: str
    line_no: int
    line: str
    detected_at: float
    before: list[str]
    after: list[str] = field(default_factory=list)

    def freeze(self) -> FatalEvent:
        return FatalEvent(
            self.pattern,
            self.line_no,
            self.line,
            self.detected_at,
            (*self.before, self.line, *self.after),
        )


class _Scanner:
    """Line-by-line matching state shared by the live watcher and the one-shot scan."""

    def __init__(
        self,
        fatal: Sequence[Pattern],
        watch: Sequence[Pattern],
        context: int,
        max_events: int,
    ) -> None:
        self.fatal = tuple(fatal)
        self.watch = tuple(watch)
        self.context = context
        self.max_events = max_events
        self.lines_read = 0
        self.recent: deque[str] = deque(maxlen=max(context, 50))
        self.events: list[_Pending] = []
        self.found: dict[str, Match] = {}

    def feed(self, line: str) -> bool:
        """Take one line; True when it is the first fatal line seen."""
        self.lines_read += 1
        first_fatal = False
        for event in self.events:
            if len(event.after) < self.context:
                event.after.append(line)
        for pattern in self.watch:
            if pattern.name not in self.found:
                m = pattern.search(line)
                if m:
                    self.found[pattern.name] = Match(
                        pattern.name, self.lines_read, line, m.groupdict()
                    )
        for pattern in self.fatal:
            if pattern.search(line):
                if len(self.events) < self.max_events:
                    before = list(self.recent)[-self.context :] if self.context else []
                    self.events.append(
                        _Pending(pattern.name, self.lines_read, line, time.time(), before)
                    )
                    first_fatal = len(self.events) == 1
                break
        self.recent.append(line)
        return first_fatal

    def snapshot(self) -> LogSnapshot:
        return LogSnapshot(
            self.lines_read,
            tuple(e.freeze() for e in self.events),
            dict(self.found),
            tuple(self.recent),
        )


def scan_lines(
    lines: Iterable[str],
    fatal: Sequence[Pattern],
    watch: Sequence[Pattern] = (),
    context: int = 10,
    max_events: int = 20,
) -> LogSnapshot:
    """Scan a finished log (pure): fatal events with context, first watch matches, tail."""
    scanner = _Scanner(fatal, watch, context, max_events)
    for line in lines:
        scanner.feed(line.rstrip("\r\n"))
    return scanner.snapshot()


def degraded_lines(snapshot: LogSnapshot | None, degraded: Sequence[Pattern]) -> tuple[str, ...]:
    """"family: line" for each degraded family the log showed (its first line), in order."""
    if snapshot is None:
        return ()
    names = {p.name for p in degraded}
    seen = sorted((m for m in snapshot.found.values() if m.pattern in names),
                  key=lambda m: m.line_no)
    return tuple(f"{m.pattern}: {m.line}" for m in seen)


class LogWatcher:
    """Follow a log file in a daemon thread; `fired` is set on the first fatal line.

    The file may not exist yet when the watcher starts (the server creates it); the watcher
    waits for it. Use as a context manager, or call start() and stop().
    """

    def __init__(
        self,
        path: str | Path,
        fatal: Sequence[Pattern],
        watch: Sequence[Pattern] = (),
        *,
        context: int = 10,
        max_events: int = 20,
        poll_s: float = 0.02,
    ) -> None:
        self.path = Path(path)
        self.poll_s = poll_s
        self.fired = threading.Event()
        self._scanner = _Scanner(fatal, watch, context, max_events)
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dspark-logwatch", daemon=True)
        self._offset = 0
        self._partial = b""

    def start(self) -> LogWatcher:
        self._thread.start()
        return self

    def stop(self) -> LogSnapshot:
        """Stop following, read what is left (a last unterminated line too), return a snapshot."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._read_available()
        if self._partial:
            self._feed([self._partial])
            self._partial = b""
        return self.snapshot()

    def __enter__(self) -> LogWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_fatal(self, timeout: float | None = None) -> bool:
        """Block until a fatal line is seen (True) or the timeout passes (False)."""
        return self.fired.wait(timeout)

    def snapshot(self) -> LogSnapshot:
        with self._lock:
            return self._scanner.snapshot()

    def catch_up(self) -> LogSnapshot:
        """Read what the file holds right now (not waiting for the next poll), then snapshot."""
        self._read_available()
        return self.snapshot()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read_available()
            self._stop.wait(self.poll_s)

    def _read_available(self) -> None:
        with self._read_lock:
            try:
                with self.path.open("rb") as f:
                    f.seek(self._offset)
                    chunk = f.read()
            except FileNotFoundError:
                return
            if not chunk:
                return
            self._offset += len(chunk)
            *complete, self._partial = (self._partial + chunk).split(b"\n")
            self._feed(complete)

    def _feed(self, raw_lines: list[bytes]) -> None:
        with self._lock:
            for raw in raw_lines:
                line = raw.decode("utf-8", errors="replace").rstrip("\r")
                if self._scanner.feed(line):
                    self.fired.set()


@dataclass(frozen=True)
class Pattern:
    """A named regular expression, searched anywhere in a line."""

    name: str
    regex: re.Pattern[str]

    def search(self, line: str) -> re.Match[str] | None:
        return self.regex.search(line)


def compile_patterns(patterns: Mapping[str, str]) -> tuple[Pattern, ...]:
    """Compile config patterns, keeping their order; ValueError names the one that is broken."""
    out = []
    for name, text in patterns.items():
        try:
            out.append(Pattern(str(name), re.compile(str(text))))
        except re.error as exc:
            raise ValueError(f"log pattern {name!r} is not a valid regex: {exc}") from exc
    return tuple(out)


def fatal_patterns(logs: Any) -> tuple[Pattern, ...]:
    """The `logs.fatal` patterns of a composed config (null ones are switched off); a broken
    regex is a usage error naming its key."""
    return _enabled(logs, "fatal")


def degraded_patterns(logs: Any) -> tuple[Pattern, ...]:
    """The `logs.degraded` patterns (vLLM overrode what was asked: not fatal), watched like
    required lines; null ones are switched off."""
    return _enabled(logs, "degraded")


def evidence_patterns(logs: Any) -> tuple[Pattern, ...]:
    """The `logs.evidence` patterns (an asked-for feature ran), watched like required lines;
    null ones are switched off."""
    return _enabled(logs, "evidence")


def fallback_patterns(logs: Any) -> tuple[Pattern, ...]:
    """The `logs.fallbacks` patterns (speculative decoding ran other than asked), watched like
    required lines; null ones are switched off."""
    return _enabled(logs, "fallbacks")


def _enabled(logs: Any, key: str) -> tuple[Pattern, ...]:
    enabled = {k: v for k, v in (getattr(logs, key) or {}).items()
               if v is not None}
    try:
        return compile_patterns(enabled)
    except ValueError as exc:
        raise UsageError(f"`logs.{key}`: {exc}") from None


STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")
# (marker, regex with an optional `took` group), in boot order; the last match of each counts
# (the target's and the draft's weights are loaded one after the other).
MARKERS = (
    ("engine_started", re.compile(r"Initializing a V1 LLM engine")),
    ("weights_loaded", re.compile(r"Loading weights took (?P<took>[\d.]+) seconds|"
                                  r"Model loading took \S+ GiB memory and (?P<took2>[\d.]+) "
                                  r"seconds")),
    ("graphs_captured", re.compile(r"Graph capturing finished in (?P<took>[\d.]+) secs")),
    ("engine_ready", re.compile(r"init engine \(profile, create kv cache, warmup model\) "
                                r"took (?P<took>[\d.]+)")),
    ("api_ready", re.compile(r"Application startup complete|Starting vLLM server on")),
)
# Each phase ends at its marker and starts at the marker before it that the log showed.
PHASES = {"engine_started": "process start to engine", "weights_loaded": "weights",
          "graphs_captured": "graph capture (+ adaptive profile)",
          "engine_ready": "engine init (KV cache, warmup)", "api_ready": "API up"}


def _stamp(line: str) -> dt.datetime | None:
    m = STAMP.search(line)
    if m is None:
        return None
    month, day, hour, minute, second = (int(g) for g in m.groups())
    try:
        return dt.datetime(2000, month, day, hour, minute, second)  # a leap year: 02-29 parses
    except ValueError:
        return None


def cold_start(lines: Iterable[str]) -> dict[str, Any] | None:
    """The boot's markers and phases from a server log's lines; None without a time stamp."""
    first: dt.datetime | None = None
    seen: dict[str, tuple[float, float | None]] = {}
    for line in lines:
        stamp = _stamp(line)
        if stamp is None:
            continue
        if first is None:
            first = stamp
        at = (stamp - first).total_seconds()
        if at < 0:  # the log crossed a year's end
            at += 366 * 86400
        for name, regex in MARKERS:
            m = regex.search(line)
            if m is not None and not (name == "api_ready" and name in seen):
                took = next((g for g in m.groupdict().values() if g), None)
                seen[name] = (at, float(took) if took else None)
        if "api_ready" in seen:
            break
    if first is None:
        return None
    markers = {name: {"at_s": at, "took_s": took} for name, (at, took) in seen.items()}
    phases, previous = {}, 0.0
    for name, _ in MARKERS:
        if name in seen:
            phases[name] = round(seen[name][0] - previous, 1)
            previous = seen[name][0]
    return {"markers": markers, "phases_s": phases,
            "total_s": seen["api_ready"][0] if "api_ready" in seen else None}


def head_lines(path: Any, limit_bytes: int = 64 << 20) -> list[str] | None:
    """The lines of a log file's first `limit_bytes` (a boot is at its start), undecodable bytes
    replaced; None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(limit_bytes).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None


def read_cold_start(path: Any) -> dict[str, Any] | None:
    """`cold_start` of a log file's boot; None when it cannot be read."""
    lines = head_lines(path)
    return None if lines is None else cold_start(lines)


NAME = "draft_params"


@dataclass(frozen=True)
class DraftParams:
    """The load line's pattern (named group `params`) and the pinned count."""

    pattern: Pattern
    expected: int


def draft_params_spec(cfg: LaunchConf) -> DraftParams | None:
    """The pin to hold a DSpark launch to; None without a pin or without DSpark."""
    pinned = cfg.model.expected.draft_params
    if pinned is None or cfg.speculative.method != "dspark":
        return None
    try:
        (pattern,) = compile_patterns({NAME: cfg.logs.draft_params})
    except ValueError as exc:
        raise UsageError(f"`logs.draft_params`: {exc}") from None
    if "params" not in pattern.regex.groupindex:
        raise UsageError("`logs.draft_params` needs a named group `(?P<params>...)`.")
    return DraftParams(pattern, int(pinned))


def seen_params(spec: DraftParams, log: LogSnapshot) -> dict[str, Any]:
    """What the log showed against the pin: params (None: no load line), expected, line, ok,
    and a sentence (a count one short names the confidence head)."""
    match = log.found.get(spec.pattern.name)
    params = int(match.groups.get("params") or -1) if match is not None else None
    if params is None:
        sentence = f"no line matched {spec.pattern.regex.pattern!r}"
    elif params == spec.expected:
        sentence = f"DSpark draft loaded {params} params (pinned {spec.expected})"
    else:
        hint = (" (one fewer: is the confidence head missing?)"
                if params == spec.expected - 1 else "")
        sentence = f"DSpark draft loaded {params} params, pinned {spec.expected}{hint}"
    return {"params": params, "expected": spec.expected,
            "line": None if match is None else match.line_no,
            "ok": params == spec.expected, "sentence": sentence}
