"""The smoke result for people: the checks table, the fatal lines' context, the verdict."""

from __future__ import annotations

from typing import Any

from dspark_cli.smoke.result import SmokeResult
from dspark_cli.status import Status

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
