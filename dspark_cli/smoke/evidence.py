"""The smoke's log evidence: for each `logs.evidence` family (a line that shows an asked-for
feature ran: breakable CUDA graphs, the ROCm indexer's flattened path), whether this profile
expects it and the line that showed it. Pure: expectations and the log snapshot in. A missing
expected line fails the smoke through `startup_lines` (it is one of them); this only shows it."""

from __future__ import annotations

from typing import Any

from dspark_cli.server.logscan import LogSnapshot
from dspark_cli.smoke.expectations import Expectations
from dspark_cli.status import Status


def log_evidence(exp: Expectations, log: LogSnapshot | None) -> tuple[Status, str, dict[str, Any]]:
    """(status, evidence, data) of the `log_evidence` check."""
    if log is None:
        return Status.skipped, "no server log", {}
    if not exp.evidence:
        return Status.skipped, "no evidence families configured (logs.evidence)", {}
    families: dict[str, dict[str, Any]] = {}
    shown = []
    for p in exp.evidence:
        m = log.found.get(p.name)
        expected = p.name in exp.expected_evidence
        families[p.name] = {"expected": expected, "line_no": m.line_no if m else None,
                            "line": m.line.strip() if m else None}
        if m:
            shown.append(f"{p.name}: line {m.line_no}" + ("" if expected else " (not expected)"))
        else:
            shown.append(f"{p.name}: {'EXPECTED' if expected else 'not expected'}, not seen")
    return Status.passed, "; ".join(shown), {"evidence": families}
