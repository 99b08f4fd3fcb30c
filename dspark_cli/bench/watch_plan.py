"""What `dspark bench` watches in every cell beside its health, its log's fatal lines and its
counters, as a dry run lists it (pure; docs/bench.md, "Watches")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class WatchLine:
    name: str
    on: bool
    what: str  # what it does, with its setting; or why it is off and how to turn it on


def watch_plan(stall_s: float | None, poll_s: float, min_acceptance: float | None,
               gpu_interval_s: float | None, gpu_idle_below: float, gpu_tool: str | None,
               fallbacks: Sequence[str], degraded: Sequence[str]) -> list[WatchLine]:
    """Every watch a cell runs, on or off, with the key that changes it."""
    gpu_on = bool(gpu_interval_s) and gpu_tool is not None
    gpu = (f"every {gpu_interval_s:g} s through {gpu_tool}: utilisation, memory, power, SM "
           f"clock, temperature per GPU; flags a GPU that throttled or sat below "
           f"{gpu_idle_below:g}% in the measured phase (watch.gpu_interval_s=0 turns it off)"
           if gpu_on else "watch.gpu_interval_s is 0" if not gpu_interval_s else
           "no nvidia-smi, amd-smi or rocm-smi on PATH (a CPU machine)")
    return [
        WatchLine("stall", bool(stall_s),
                  f"reads /metrics every {poll_s:g} s; requests running or waiting and no "
                  f"token generated for {stall_s:g} s end the cell as invalid, `stalled` "
                  "(watch.stall_s=0 turns it off)" if stall_s else "watch.stall_s is 0"),
        WatchLine("fallbacks", True,
                  f"log lines {', '.join(fallbacks) or '(none configured)'} and the DSpark "
                  "draft's parameter count: an arm that asked for adaptive verification and "
                  "ran without it is invalid (logs.fallbacks.<name>=null turns a family off)"),
        WatchLine("degraded", bool(degraded),
                  f"log lines {', '.join(degraded)}: the cell stays valid and is marked "
                  "degraded (logs.degraded.<name>=null turns a family off)"),
        WatchLine("acceptance", min_acceptance is not None,
                  f"a speculating arm whose acceptance rate is at or below {min_acceptance:g} "
                  "is flagged (watch.min_acceptance=null turns it off)"
                  if min_acceptance is not None else "watch.min_acceptance is null"),
        WatchLine("cold_start", True, "the boot split into the phases its log shows (engine, "
                  "weights, graph capture with the adaptive profile, engine init, API)"),
        WatchLine("gpus", gpu_on, gpu),
    ]


def watch_text(lines: Sequence[WatchLine]) -> str:
    """The dry run's comment block."""
    return "".join(f"# watch {w.name}: {'on' if w.on else 'OFF'}: {w.what}\n" for w in lines)


def watch_dicts(lines: Sequence[WatchLine]) -> list[dict[str, object]]:
    return [asdict(w) for w in lines]
