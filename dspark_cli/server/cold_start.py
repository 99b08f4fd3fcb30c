"""A cold boot split into the phases its log shows (pure): from the first line to the engine,
the weights loaded, the CUDA graphs captured (adaptive verification profiles its step costs
inside the capture, with no line of its own in vLLM 0.32), the engine ready, the API ready.

Each marker is the line vLLM 0.32 prints (held against its source by tests/test_cold_start.py)
and the time stamp vLLM puts on it (`INFO 12-04 16:01:34`, one-second resolution); where the line
says how long its step took ("Loading weights took 0.01 seconds"), that is kept too. A marker
that does not appear (graphs on CPU or with --enforce-eager) is left out, and its phase with it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from typing import Any

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


def read_cold_start(path: Any, limit_bytes: int = 64 << 20) -> dict[str, Any] | None:
    """`cold_start` of a log file (its first `limit_bytes`: a boot is at its start); None when
    it cannot be read."""
    try:
        with open(path, "rb") as f:
            text = f.read(limit_bytes).decode("utf-8", errors="replace")
    except OSError:
        return None
    return cold_start(text.splitlines())
