"""The smoke report: one JSON document (run directory, `--json`) and a rich table for people."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dspark_cli.server.metrics import GENERATION_TOKENS, spec_decode
from dspark_cli.smoke.checks import Status
from dspark_cli.smoke.runner import SmokeRun

STYLE = {Status.passed: "green", Status.failed: "bold red", Status.skipped: "dim",
         Status.not_run: "yellow"}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def counters(run: SmokeRun) -> dict[str, Any] | None:
    """Server counters over the smoke request (after - before), when both scrapes exist."""
    obs = run.observations
    if obs.metrics_before is None or obs.metrics_after is None:
        return None
    delta = obs.metrics_after.delta(obs.metrics_before)
    spec = spec_decode(delta)
    return {"generation_tokens": round(delta.total(GENERATION_TOKENS)),
            "spec_decode": spec.as_dict() if spec else None}


def build(run: SmokeRun, *, mode: str, base_url: str, log_path: Path | None,
          profiles: dict[str, Any], provenance: dict[str, Any]) -> dict[str, Any]:
    """The JSON report: verdict, every check with evidence, timings, counters, versions."""
    return {
        "verdict": {"passed": run.verdict.passed, "exit_code": int(run.verdict.exit_code),
                    "summary": run.verdict.summary},
        "mode": mode,
        "base_url": base_url,
        "log": str(log_path) if log_path else None,
        "profiles": profiles,
        "checks": [{"name": r.name, "status": r.status.value, "evidence": r.evidence,
                    "data": dict(r.data)} for r in run.results],
        "timings": {k: _round(v) for k, v in run.timings.items()},
        "decided_at": run.decided_at,
        "request": {"state": run.observations.request.state.value,
                    "latency_s": _round(run.observations.request.latency_s),
                    "completion_tokens": run.observations.request.completion_tokens},
        "counters": counters(run),
        "versions": {"server": run.server_version, **provenance},
    }


def write(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


def render(report: dict[str, Any]) -> Any:
    """A rich renderable: the checks table, the fatal lines' context, and the verdict."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"dspark smoke ({report['mode']}, {report['base_url']})",
                  title_justify="left")
    table.add_column("check")
    table.add_column("status")
    table.add_column("evidence", overflow="fold")
    for check in report["checks"]:
        status = Status(check["status"])
        table.add_row(check["name"], Text(status.value, style=STYLE[status]), check["evidence"])
    parts: list[Any] = [table]
    for check in report["checks"]:
        for event in check["data"].get("events", [])[:1]:
            parts.append(Text(f"log around the {event['pattern']} line (line {event['line_no']}):",
                              style="bold"))
            parts.append(Text("\n".join("  " + line for line in event["context"])))
    t = report["timings"]
    shown = {k: "-" if v is None else f"{v} s" for k, v in t.items()}
    parts.append(Text(f"boot-to-health {shown['boot_to_health_s']}, request "
                      f"{shown['request_latency_s']}, teardown {shown['teardown_s']}, "
                      f"total {shown['total_s']}"))
    verdict = report["verdict"]
    parts.append(Text(("PASS" if verdict["passed"] else "FAIL") + f": {verdict['summary']}",
                      style="bold green" if verdict["passed"] else "bold red"))
    return Group(*parts)
