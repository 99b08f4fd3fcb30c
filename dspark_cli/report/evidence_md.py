"""What the server logs showed (the evidence lines, the faults ruled out) and what reproducing
the image needs, as Markdown (pure; record strings through `markup`)."""

from __future__ import annotations

from dspark_cli.report.container import Reproduction
from dspark_cli.report.log_findings import FaultScan, LogFindings
from dspark_cli.report.markup import code, table, text


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


def log_findings(f: LogFindings | None) -> list[str]:
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


def reproduction(r: Reproduction | None) -> list[str]:
    if r is None:
        return []
    return [text(r.vllm_base), "", text(r.vllm_patch), "", text(r.caveat)]
