"""What the server logs showed, from the smoke and bench records: the evidence lines of the
features the profile asks for (`logs.evidence`: breakable CUDA graphs, `use_flattening=True`),
and the faults ruled out (the fatal-line families each log was scanned for, and what matched).
Pure: records in, a section out. Rendered here too (`log_findings_section`), record strings
through `markup`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dspark_cli.report.markup import code, table, text
from dspark_cli.report.sources import BenchRecords, SmokeRecords, lookup


@dataclass(frozen=True)
class EvidenceRow:
    family: str
    expected: bool  # the profile requires the line
    line_no: int | None
    line: str | None


@dataclass(frozen=True)
class FaultScan:
    where: str  # "the smoke's server log (1,200 lines)", "63 bench cells' server logs"
    families: tuple[str, ...]  # the fatal-line families scanned for
    found: tuple[str, ...]  # what matched ("family: line", a bench cell's id first)


@dataclass(frozen=True)
class LogFindings:
    evidence: tuple[EvidenceRow, ...]
    evidence_note: str  # why there are no rows, else ""
    faults: tuple[FaultScan, ...]


def _check(smoke: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    return next((c for c in smoke.get("checks") or () if c.get("name") == name), None)


def _families(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The enabled `logs.fatal` families of a run's resolved config."""
    fatal = lookup(config, "logs", "fatal") or {}
    return tuple(str(k) for k, v in fatal.items() if v is not None)


def _evidence(smoke: SmokeRecords | None) -> tuple[tuple[EvidenceRow, ...], str]:
    if smoke is None:
        return (), "no smoke record"
    check = _check(smoke.smoke, "log_evidence")
    if check is None:
        return (), "the smoke record has no log_evidence check (written before dspark kept it)"
    families = lookup(check, "data", "evidence") or {}
    if not families:
        return (), str(check.get("evidence") or "no evidence families")
    return tuple(EvidenceRow(str(name), bool(f.get("expected")), f.get("line_no"),
                             None if f.get("line") is None else str(f["line"]))
                 for name, f in sorted(families.items())), ""


def _smoke_scan(smoke: SmokeRecords) -> FaultScan | None:
    check = _check(smoke.smoke, "no_fatal_lines")
    if check is None or check.get("status") not in ("passed", "failed"):
        return None
    data = check.get("data") or {}
    families = tuple(str(f) for f in data.get("families") or ()) or _families(smoke.config)
    lines = data.get("lines")
    where = "the smoke's server log" + (f" ({lines:,} lines)" if isinstance(lines, int) else "")
    found = tuple(f"{e.get('pattern')}: line {e.get('line_no')}: {e.get('line')}"
                  for e in data.get("events") or () if isinstance(e, Mapping))
    if check.get("status") == "failed" and not found:
        found = (str(check.get("evidence") or "a fatal line"),)
    return FaultScan(where, families, found)


def _bench_scan(bench: BenchRecords) -> FaultScan | None:
    if not bench.cells:
        return None
    configs = [bench.arm_configs[a] for a in sorted(bench.arm_configs)]
    families = next((f for f in map(_families, configs) if f), ())
    found = tuple(f"{c.get('cell_id')}: {line}" for c in bench.cells
                  if isinstance(c.get("fatal_lines"), list)
                  for line in c["fatal_lines"] if isinstance(line, str))
    n = len(bench.cells)
    return FaultScan(f"{n} bench cell{'s' if n != 1 else ''}' server logs", families, found)


def findings(smoke: SmokeRecords | None, bench: BenchRecords | None) -> LogFindings:
    evidence, note = _evidence(smoke)
    scans = [s for s in (_smoke_scan(smoke) if smoke else None,
                         _bench_scan(bench) if bench else None) if s is not None]
    return LogFindings(evidence, note, tuple(scans))


def _seen(line_no: int | None, line: str | None) -> str:
    return "not seen" if line_no is None else f"line {line_no}: {code(line or '')}"


def _scan(s: FaultScan, before: FaultScan | None) -> str:
    where, n = text(s.where), len(s.families)
    if not s.families:
        scanned = f"{where} scanned (the families are not recorded)"
    elif before is not None and before.families == s.families:
        scanned = f"{where} scanned for the same {n} families"
    else:
        scanned = f"{where} scanned for {n} fatal-line families ({text(', '.join(s.families))})"
    if not s.found:
        return f"- {scanned}: none matched."
    return f"- {scanned}: MATCHED {len(s.found)}: " + "; ".join(code(f) for f in s.found)


def log_findings_section(f: LogFindings | None) -> list[str]:
    if f is None:
        return []
    lines = ["Log evidence of the asked-for features (`logs.evidence`; expected where this "
             "profile requires the line):", ""]
    if f.evidence:
        lines += table(("line family", "expected by this profile", "seen in the server log"),
                       [(text(r.family), "yes" if r.expected else "no",
                         _seen(r.line_no, r.line)) for r in f.evidence])
    else:
        lines.append(f"None recorded: {text(f.evidence_note)}.")
    lines += ["", "Faults ruled out:", ""]
    if not f.faults:
        return [*lines, "- none: no server log was scanned (no smoke or bench record)."]
    return [*lines, *(_scan(s, f.faults[i - 1] if i else None) for i, s in enumerate(f.faults))]
