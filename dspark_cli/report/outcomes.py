"""What the validation's own records say passed: the stages, the focused tests and the smoke
(pure: records in, sections out)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspark_cli.report.sections import NOT_RUN, CheckRow, Counters, Focused, Smoke, StageRow
from dspark_cli.report.sources import SmokeRecords, Sources, lookup
from dspark_cli.run_files import SMOKE_JSON

SMOKE_LIMITS = ("It demonstrates that the server started, generated tokens and (where "
                "speculative decoding is on) executed its speculative path. It is not a "
                "throughput, latency, quality, or adaptive-vs-fixed performance measurement.")


def stages(src: Sources) -> tuple[StageRow, ...]:
    """`dspark validate`'s stages as it recorded them, else one row per smoke or bench run."""
    if src.validate is not None:
        return tuple(StageRow(str(s["name"]), str(s["status"]), str(s.get("detail") or ""))
                     for s in src.validate.get("stages", []))
    rows = []
    if src.smoke is not None:
        rows.append(StageRow("smoke", "passed" if lookup(src.smoke.smoke, "verdict", "passed")
                             else "failed", str(lookup(src.smoke.smoke, "verdict", "summary"))))
    if src.bench is not None:
        invalid = [c for c in src.bench.cells if not c.get("valid")]
        rows.append(StageRow("bench", "failed" if invalid else "passed",
                             f"{len(src.bench.cells) - len(invalid)} of {len(src.bench.cells)} "
                             "cells valid"))
    return tuple(rows)


def focused(tests: Mapping[str, Any] | None) -> Focused:
    if tests is None:
        return Focused(NOT_RUN, (), None, {}, "no focused tests were configured "
                       "(validate.tests)")
    return Focused(str(tests["status"]), tuple(tests.get("node_ids") or ()),
                   tests.get("source"), dict(sorted((tests.get("counts") or {}).items())),
                   str(tests.get("detail") or ""))


def _counters(smoke: Mapping[str, Any]) -> Counters | None:
    spec = lookup(smoke, "counters", "spec_decode")
    if not spec:
        return None
    check = next((c for c in smoke.get("checks", []) if c.get("name") == "spec_decode"), {})
    k = lookup(check, "data", "k")
    drafts, tokens = int(spec["drafts"]), int(spec["draft_tokens"])
    if k is None:
        relation = "no K to relate them to (the spec_decode check did not run)"
    elif lookup(check, "data", "rule") == "at_most":
        relation = f"{tokens} <= {drafts} x K={k} (a drafter that may propose fewer than K)"
    else:
        sign = "=" if tokens == drafts * int(k) else "!="
        relation = f"{tokens} {sign} {drafts} x K={k}"
    return Counters(drafts, tokens, int(spec["accepted"]), None if k is None else int(k),
                    relation)


def smoke(rec: SmokeRecords | None) -> Smoke | None:
    if rec is None:
        return None
    s = rec.smoke
    checks = tuple(CheckRow(str(c["name"]), str(c["status"]), str(c.get("evidence") or ""))
                   for c in s.get("checks", []))
    return Smoke(str(lookup(s, "verdict", "summary")), bool(lookup(s, "verdict", "passed")),
                 str(s.get("mode")), checks, lookup(s, "request", "completion_tokens"),
                 _counters(s), SMOKE_LIMITS, str(rec.directory / SMOKE_JSON))
