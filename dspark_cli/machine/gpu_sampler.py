"""Sample every GPU while a cell runs, through the vendor's tool found in the image.

A throttled or half-idle GPU explains a number nothing else does (AIPerf and InferenceX record
GPU telemetry per run). On NVIDIA, `nvidia-smi --query-gpu=... -lms N` prints one CSV line per
GPU every N ms; a reader thread keeps them with the time they arrived. On ROCm, `amd-smi metric
--json` (or `rocm-smi --json`) is asked every interval. Without any of them (a CPU machine)
nothing is sampled, and the caller says so once.

Standalone (the lead runs it on a GPU host):
    python -m dspark_cli.machine.gpu_sampler --interval 0.2 --duration 5 --out gpus.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dspark_cli.machine.tool import ask
from dspark_cli.untrusted import printable

# What each sample holds, in this order: utilisation (%), memory used (MiB), power (W), SM clock
# (MHz), temperature (C), and the active clock-throttle reasons (a bit mask; None: unknown).
FIELDS = ("utilization_pct", "memory_used_mib", "power_w", "sm_clock_mhz", "temperature_c",
          "throttle_reasons")
NVIDIA_QUERY = ("index", "utilization.gpu", "memory.used", "power.draw", "clocks.sm",
                "temperature.gpu", "clocks_throttle_reasons.active")
# nvidia-smi's throttle-reason bits that slow a busy GPU down (idle 0x1, application clocks 0x2
# and sync boost 0x20 do not): SW power cap, HW slowdown, SW/HW thermal, HW power brake.
THROTTLE_BITS = 0x4 | 0x8 | 0x40 | 0x80 | 0x100
TOOLS = ("nvidia-smi", "amd-smi", "rocm-smi")
# A reading past this is no GPU's (1e308 W, a 1e300 mask): unreadable, so a mean stays finite.
MAX_READING = 1e15  # rocm-smi gives memory in bytes (192 GB: 2e11)
MAX_LINE = 4096  # bytes of one nvidia-smi line
MAX_GPUS = 64  # GPUs of one answer
MAX_SAMPLES = 1_000_000  # samples kept of one run (8 GPUs every 0.1 s for 3.5 hours)
_INDEX = re.compile(r"[0-9]{1,4}")
# A reading as the tools print it: a plain number at the start ("96", "612.5", "1e308",
# "1843Mhz"); digits picked out of the middle would read "1e308" as 1308.
_LEADING_NUMBER = re.compile(r"\s*([-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)")


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the sampler started
    gpu: str
    values: tuple[float | None, ...]  # FIELDS

    def get(self, name: str) -> float | None:
        return self.values[FIELDS.index(name)]


def _reading(value: float) -> float | None:
    """`value` when a GPU could report it: finite and within MAX_READING."""
    return value if math.isfinite(value) and abs(value) <= MAX_READING else None


def _number(text: str) -> float | None:
    text = text.strip()
    try:
        value = float(int(text, 16)) if text.startswith("0x") else float(text)
    except (ValueError, OverflowError):
        return None  # "[N/A]", "[Not Supported]", a mask too long for a float
    return _reading(value)


def parse_nvidia_line(line: str, columns: int) -> tuple[str, tuple[float | None, ...]] | None:
    """One `--format=csv,noheader,nounits` line of NVIDIA_QUERY (or all but its last column)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != columns or not _INDEX.fullmatch(parts[0]):
        return None
    values = [_number(p) for p in parts[1:]]
    values += [None] * (len(FIELDS) - len(values))
    return parts[0], tuple(values)


def _amd_value(entry: Any) -> float | None:
    """amd-smi's `{"value": 93, "unit": "%"}` or a bare number/string; "N/A" is None."""
    if isinstance(entry, Mapping):
        entry = entry.get("value")
    if isinstance(entry, int | float) and not isinstance(entry, bool):
        try:
            return _reading(float(entry))
        except OverflowError:  # an integer past any float
            return None
    if isinstance(entry, str):
        match = _LEADING_NUMBER.match(entry)
        return _number(match[1]) if match else None
    return None


def _section(row: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A section of an amd-smi GPU object; one it could not read is the string "N/A"."""
    value = row.get(key)
    return value if isinstance(value, Mapping) else {}


# amd-smi says only whether a GPU throttles (power.throttle_status), not why: a throttled one
# counts as every slowdown bit of nvidia-smi's mask set, an unthrottled one as none.
_AMD_THROTTLE = {"THROTTLED": float(THROTTLE_BITS), "UNTHROTTLED": 0.0}


def _gpu_id(value: Any, position: int) -> str:
    """A GPU's id as the tool gave it when it is plain digits, else its position."""
    text = str(value) if isinstance(value, int | str) and not isinstance(value, bool) else ""
    return text if _INDEX.fullmatch(text) else str(position)


def _json(text: str) -> Any:
    """The tool's JSON; ValueError when it is none (or nests past a reader)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("its JSON nests too deep") from None


def parse_amd_smi(text: str) -> list[tuple[str, tuple[float | None, ...]]]:
    """`amd-smi metric --usage --power --clock --temperature --mem-usage --json`: a list of GPU
    objects (`{"gpu_data": [...]}` in later releases), each value `{"value", "unit"}` or "N/A"
    (tests/data/gpu_tools/amd_smi_metric.json: the format from the tool's source); ValueError
    for any other shape."""
    data = _json(text)
    rows = data if isinstance(data, list) else (
        data.get("gpu_data", [data]) if isinstance(data, Mapping) else None)
    if not isinstance(rows, list):
        raise ValueError(f"no list of GPUs in its JSON (a {type(data).__name__})")
    out: list[tuple[str, tuple[float | None, ...]]] = []
    for row in rows[:MAX_GPUS]:
        if not isinstance(row, Mapping):
            continue
        usage, power = _section(row, "usage"), _section(row, "power")
        clock = _section(_section(row, "clock"), "gfx_0")
        temp, mem = _section(row, "temperature"), _section(row, "mem_usage")
        hotspot = _amd_value(temp.get("hotspot"))
        out.append((_gpu_id(row.get("gpu"), len(out)), (
            _amd_value(usage.get("gfx_activity")), _amd_value(mem.get("used_vram")),
            _amd_value(power.get("socket_power")), _amd_value(clock.get("clk")),
            hotspot if hotspot is not None else _amd_value(temp.get("edge")),
            _AMD_THROTTLE.get(str(power.get("throttle_status"))))))
    return out


def find_tool() -> str | None:
    """The first vendor tool on PATH that answers (nvidia-smi: it lists a GPU; a tool without
    its driver does not), or None."""
    for tool in TOOLS:
        if not shutil.which(tool):
            continue
        if tool != "nvidia-smi":
            return tool
        out = ask([tool, "--query-gpu=index", "--format=csv,noheader,nounits"], 15)
        if out is not None and out.strip():
            return tool
    return None


class GpuSampler:
    """Samples in a background reader (nvidia-smi -lms) or poller (amd-smi); `stop()` returns
    the samples. `tool` None samples nothing."""

    def __init__(self, interval_s: float, tool: str | None = None) -> None:
        self.interval_s = interval_s
        self.tool = tool
        self.samples: list[Sample] = []
        self.error: str | None = None
        self.unreadable = 0  # answers (nvidia-smi lines, amd-smi calls) no sample came of
        self._first_unreadable = ""
        self._start = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()  # a process is started only while not stopped
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None

    def now(self) -> float:
        """Seconds since the sampler started (the samples' clock)."""
        return time.monotonic() - self._start

    def start(self) -> GpuSampler:
        self._start = time.monotonic()
        if self.tool == "nvidia-smi":
            self._thread = threading.Thread(target=self._guarded, args=(self._nvidia,),
                                            daemon=True, name="dspark-gpu-sampler")
        elif self.tool in ("amd-smi", "rocm-smi"):
            self._thread = threading.Thread(target=self._guarded, args=(self._amd,),
                                            daemon=True, name="dspark-gpu-sampler")
        if self._thread is not None:
            self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        with self._lock:
            self._stop.set()
            proc = self._proc
        if proc is not None:  # its whole group: a wrapper's child may hold the pipe
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._thread is not None:
            self._thread.join(10)
        return list(self.samples)

    def _guarded(self, body: Callable[[], None]) -> None:
        """The reader's body; whatever it raises ends sampling with an error in the record,
        never a dead thread's traceback in the middle of a bench."""
        try:
            body()
        except Exception as exc:  # any failure of a tool's answer
            self.error = printable(f"{self.tool}: sampling stopped: {type(exc).__name__}: "
                                   f"{exc}")[:300]

    def _nvidia(self) -> None:
        for query in (NVIDIA_QUERY, NVIDIA_QUERY[:-1]):  # an old driver lacks the last field
            argv = ["nvidia-smi", f"--query-gpu={','.join(query)}",
                    "--format=csv,noheader,nounits", "-lms", str(max(int(self.interval_s * 1000),
                                                                    10))]
            with self._lock:
                if self._stop.is_set():
                    return
                try:
                    proc = self._proc = subprocess.Popen(
                        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, start_new_session=True)
                except OSError as exc:
                    self.error = f"nvidia-smi: {exc}"
                    return
            got = self._read(proc.stdout, len(query))
            proc.wait()
            if got or self._stop.is_set():
                return
        self.error = "nvidia-smi answered no sample line"

    def _read(self, stream: IO[bytes] | None, columns: int) -> int:
        got = 0
        last_error = ""
        self.unreadable, self._first_unreadable = 0, ""  # this query's own
        for raw in iter(lambda: stream.readline(MAX_LINE) if stream else b"", b""):
            try:
                line = raw.decode("utf-8")
                parsed = parse_nvidia_line(line, columns) if raw.endswith(b"\n") or len(
                    raw) < MAX_LINE else None
            except UnicodeDecodeError:
                line, parsed = raw.decode("utf-8", "replace"), None
            if parsed is None:
                last_error = printable(line.strip())[:200]
                self._unreadable(f"nvidia-smi: {last_error}")
                continue
            got += 1
            self._keep([Sample(round(self.now(), 3), parsed[0], parsed[1])])
        if not got and last_error:
            self.error = f"nvidia-smi: {last_error}"
        elif got:  # a refused first query is not this one's error
            self.error = None
        return got

    def _keep(self, samples: list[Sample]) -> None:
        room = MAX_SAMPLES - len(self.samples)
        self.samples += samples[:max(room, 0)]

    def _unreadable(self, what: str) -> None:
        """An answer no sample came of: counted, the first one kept for the record."""
        self.unreadable += 1
        self._first_unreadable = self._first_unreadable or what[:300]

    @property
    def problem(self) -> str | None:
        """What went wrong, for the record: the tool's error, or how many of its answers were
        unreadable (those samples are missing, the rest stand)."""
        if self.error is not None:
            return self.error
        if self.unreadable:
            return (f"{self.unreadable} unreadable answer(s), no sample taken of them "
                    f"(first: {self._first_unreadable})")
        return None

    def _amd(self) -> None:
        argv = (["amd-smi", "metric", "--usage", "--power", "--clock", "--temperature",
                 "--mem-usage", "--json"] if self.tool == "amd-smi" else
                ["rocm-smi", "--showuse", "--showpower", "--showtemp", "--showmeminfo", "vram",
                 "--showclocks", "--json"])
        while not self._stop.is_set():
            t = round(self.now(), 3)
            out = ask(argv, 10)
            try:
                if out is None:
                    raise ValueError("no answer (not there, failed, hung or flooded)")
                text = out.decode("utf-8")
                rows = parse_amd_smi(text) if self.tool == "amd-smi" else parse_rocm_smi(text)
                self._keep([Sample(t, gpu, values) for gpu, values in rows])
            except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError and shapes too
                self._unreadable(printable(f"{self.tool}: {exc}"))
            self._stop.wait(self.interval_s)


def _rocm_clock(value: Any) -> float | None:
    """rocm-smi's clock level, `"1 (1843Mhz)"` (`"S (133Mhz)"` in deep sleep): its MHz."""
    text = str(value)
    inside = text[text.find("(") + 1:text.rfind("Mhz")] if "(" in text else ""
    return _number(inside) if inside else None


def parse_rocm_smi(text: str) -> list[tuple[str, tuple[float | None, ...]]]:
    """`rocm-smi --showuse --showpower --showtemp --showmeminfo vram --showclocks --json`:
    `{"card0": {"GPU use (%)": "96", ...}}`, every value a string
    (tests/data/gpu_tools/rocm_smi.json: the format from the tool's source)."""
    data = _json(text)
    if not isinstance(data, Mapping):
        raise ValueError(f"no object of cards in its JSON (a {type(data).__name__})")
    out: list[tuple[str, tuple[float | None, ...]]] = []
    for card, row in data.items():
        if not card.startswith("card") or not isinstance(row, Mapping):
            continue
        if len(out) == MAX_GPUS:
            break

        def value(*names: str, row: Mapping[str, Any] = row) -> float | None:
            return next((v for n in names if (v := _amd_value(row.get(n))) is not None), None)

        used = value("VRAM Total Used Memory (B)")
        out.append((_gpu_id(card[4:], len(out)), (
            value("GPU use (%)"), None if used is None else round(used / 2**20, 1),
            value("Current Socket Graphics Package Power (W)",
                  "Average Graphics Package Power (W)"),
            _rocm_clock(row.get("sclk clock level")),
            value("Temperature (Sensor junction) (C)", "Temperature (Sensor edge) (C)"),
            None)))
    return out


@dataclass(frozen=True)
class GpuSummary:
    """One GPU's means over a window, and whether it throttled or sat idle there."""

    gpu: str
    samples: int
    means: Mapping[str, float | None] = field(default_factory=dict)
    max_temperature_c: float | None = None
    throttled_share: float | None = None  # share of samples with a slowdown bit set
    idle: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "samples": self.samples, "means": dict(self.means),
                "max_temperature_c": self.max_temperature_c,
                "throttled_share": self.throttled_share, "idle": self.idle}


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None and math.isfinite(v)]
    return round(sum(kept) / len(kept), 2) if kept else None


def summarize(samples: Sequence[Sample], start: float | None = None, end: float | None = None,
              idle_below: float = 10.0) -> list[GpuSummary]:
    """Per GPU, the means of the samples in [start, end] (None: open), the throttled share and
    the idle flag (mean utilisation below `idle_below` percent)."""
    window = [s for s in samples if (start is None or s.t >= start)
              and (end is None or s.t <= end)]
    out = []
    for gpu in sorted({s.gpu for s in window}, key=lambda g: (len(g), g)):
        mine = [s for s in window if s.gpu == gpu]
        means = {name: _mean([s.get(name) for s in mine]) for name in FIELDS[:-1]}
        bits = [s.get("throttle_reasons") for s in mine]
        known = [int(b) for b in bits if b is not None]
        temps = [t for s in mine if (t := s.get("temperature_c")) is not None]
        util = means["utilization_pct"]
        out.append(GpuSummary(
            gpu, len(mine), means, max(temps) if temps else None,
            round(sum(1 for b in known if b & THROTTLE_BITS) / len(known), 3) if known else None,
            util is not None and util < idle_below))
    return out


def record(tool: str | None, interval_s: float, samples: Sequence[Sample],
           window: tuple[float, float] | None, idle_below: float,
           error: str | None = None) -> dict[str, Any]:
    """The cell's `gpus` section: the tool, per-GPU summaries over the whole run and over the
    measured phase (`window`), and the flags (a GPU that throttled or sat idle there)."""
    measured = summarize(samples, *window, idle_below=idle_below) if window else []
    flags = [f"GPU {g.gpu} sat idle in the measured phase (mean utilisation "
             f"{g.means.get('utilization_pct')}% < {idle_below:g}%)" for g in measured if g.idle]
    flags += [f"GPU {g.gpu} throttled in {g.throttled_share:.0%} of the measured phase's "
              "samples (power or thermal slowdown)" for g in measured
              if g.throttled_share]
    return {"tool": tool, "interval_s": interval_s, "samples": len(samples),
            "window_s": None if window is None else [round(w, 3) for w in window],
            "whole_run": [g.to_dict() for g in summarize(samples, idle_below=idle_below)],
            "measured": [g.to_dict() for g in measured], "flags": flags, "error": error}


def samples_dict(samples: Sequence[Sample]) -> dict[str, Any]:
    """Every sample, for the cell's own `gpus.json`."""
    return {"fields": ["t", "gpu", *FIELDS],
            "rows": [[s.t, s.gpu, *s.values] for s in samples]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dspark_cli.machine.gpu_sampler",
        description="Sample every GPU through its vendor's tool for a while; print the "
                    "per-GPU means (and write every sample with --out).")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds to sample")
    parser.add_argument("--out", type=Path, help="write the summary and every sample here")
    parser.add_argument("--idle-below", type=float, default=10.0,
                        help="mean utilisation (%%) below which a GPU counts as idle")
    opts = parser.parse_args(argv)
    tool = find_tool()
    if tool is None:
        print("gpu_sampler: no vendor tool (nvidia-smi, amd-smi, rocm-smi) on PATH: nothing "
              "to sample", file=sys.stderr)
        return 1
    sampler = GpuSampler(opts.interval, tool).start()
    time.sleep(opts.duration)
    samples = sampler.stop()
    doc = {**record(tool, opts.interval, samples, (0.0, opts.duration), opts.idle_below,
                    sampler.problem), "all_samples": samples_dict(samples)}
    if opts.out is not None:
        opts.out.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    shown = {k: v for k, v in doc.items() if k != "all_samples"}
    print(json.dumps(shown, indent=2, allow_nan=False))
    return 0 if samples else 1


if __name__ == "__main__":
    sys.exit(main())
