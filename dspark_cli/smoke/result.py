"""What a smoke found, frozen, with `to_dict()` (smoke.json, `--json`), and `render`: the
checks table, the fatal lines' context and the verdict for people."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dspark_cli.console import json_text
from dspark_cli.launch.secrets import SCRUB
from dspark_cli.server.metrics import GENERATION_TOKENS, SpecDecode, engine_tokens, spec_decode
from dspark_cli.smoke.checks import CheckResult, RequestOutcome, Verdict
from dspark_cli.smoke.runner import SmokeRun, Timings
from dspark_cli.status import Status
from dspark_cli.untrusted import write_atomic


@dataclass(frozen=True)
class Counters:
    """Server counters over the smoke request (after - before)."""

    generation_tokens: int
    spec_decode: SpecDecode | None
    # Per data parallel engine (the `engine` label): every engine's share of the tokens.
    generation_tokens_by_engine: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"generation_tokens": self.generation_tokens,
                "generation_tokens_by_engine": dict(self.generation_tokens_by_engine),
                "spec_decode": self.spec_decode.as_dict() if self.spec_decode else None}


@dataclass(frozen=True)
class SmokeResult:
    verdict: Verdict
    mode: str  # "managed" or "attached"
    base_url: str
    log: Path | None
    profiles: Mapping[str, Any]
    checks: tuple[CheckResult, ...]
    timings: Timings
    decided_at: float
    request: RequestOutcome
    counters: Counters | None
    server_version: str | None
    provenance: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": {"passed": self.verdict.passed, "exit_code": int(self.verdict.exit_code),
                        "summary": self.verdict.summary},
            "mode": self.mode,
            "base_url": self.base_url,
            "log": str(self.log) if self.log else None,
            "profiles": dict(self.profiles),
            "checks": [c.to_dict() for c in self.checks],
            "timings": self.timings.to_dict(),
            "decided_at": self.decided_at,
            "request": {"state": self.request.state.value,
                        "latency_s": _round(self.request.latency_s),
                        "completion_tokens": self.request.completion_tokens},
            "counters": self.counters.to_dict() if self.counters else None,
            "versions": {"server": self.server_version, **self.provenance},
        }

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, SCRUB(json_text(self.to_dict())))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def counters(run: SmokeRun) -> Counters | None:
    obs = run.observations
    if obs.metrics_before is None or obs.metrics_after is None:
        return None
    delta = obs.metrics_after.delta(obs.metrics_before)
    return Counters(round(delta.total(GENERATION_TOKENS)), spec_decode(delta),
                    engine_tokens(delta))


def build(run: SmokeRun, *, mode: str, base_url: str, log_path: Path | None,
          profiles: Mapping[str, Any], provenance: Mapping[str, Any]) -> SmokeResult:
    """What one smoke run found: verdict, every check with evidence, timings, counters."""
    return SmokeResult(run.verdict, mode, base_url, log_path, profiles, run.results,
                       run.timings, run.decided_at, run.observations.request, counters(run),
                       run.server_version, provenance)


STYLE = {Status.passed: "green", Status.failed: "bold red", Status.skipped: "dim",
         Status.not_run: "yellow"}


def render(result: SmokeResult) -> Any:
    """A rich renderable of the result."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"dspark smoke ({result.mode}, {result.base_url})",
                  title_justify="left")
    table.add_column("check")
    table.add_column("status")
    table.add_column("evidence", overflow="fold")
    for check in result.checks:
        table.add_row(check.name, Text(check.status.value, style=STYLE[check.status]),
                      check.evidence)
    parts: list[Any] = [table]
    for check in result.checks:
        for event in check.data.get("events", [])[:1]:
            parts.append(Text(f"log around the {event['pattern']} line (line {event['line_no']}):",
                              style="bold"))
            parts.append(Text("\n".join("  " + line for line in event["context"])))
    shown = {k: "-" if v is None else f"{v} s" for k, v in result.timings.to_dict().items()}
    parts.append(Text(f"boot-to-health {shown['boot_to_health_s']}, request "
                      f"{shown['request_latency_s']}, teardown {shown['teardown_s']}, "
                      f"total {shown['total_s']}"))
    verdict = result.verdict
    parts.append(Text(("PASS" if verdict.passed else "FAIL") + f": {verdict.summary}",
                      style="bold green" if verdict.passed else "bold red"))
    return Group(*parts)
