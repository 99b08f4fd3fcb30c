"""Watch a server log file live for fatal lines and for lines that must appear.

The patterns are data (config: name -> regular expression, compiled by log_patterns.py);
this module only matches them.
A `LogWatcher` follows the file from its first byte in a thread, polling every `poll_s`
(default 20 ms), so a fatal line is signalled through `watcher.fired` well within 100 ms of
being written, with the lines around it kept for the report. It also records the first match
of each "watch" pattern (required startup lines), with the regex's named groups.

Public API (also used by `dspark bench`):
    scan_lines(lines, fatal, watch) -> LogSnapshot            (pure, for a finished log)
    LogWatcher(path, fatal, watch).start() / .fired / .wait_fatal(t) / .snapshot()
        / .catch_up() / .stop()
    LogSnapshot.upto(n)                                       (what the first n lines showed)
    degraded_lines(snapshot, degraded) -> tuple[str, ...]     ("family: line", first of each)
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dspark_cli.server.log_patterns import Pattern


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
