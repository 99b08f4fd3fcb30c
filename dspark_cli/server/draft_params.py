"""The DSpark draft's parameter count from its load line ("DSpark draft model loaded: %d
params"), held to the profile's pin (`model.expected.draft_params`: 97 for
DeepSeek-V4-Flash-DSpark; one fewer when the confidence head is missing, which vLLM does not
refuse). The pattern is a log family (`logs.draft_params`); the smoke fails on a mismatch, each
bench cell records what its server printed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from dspark_cli.errors import UsageError
from dspark_cli.server.log_patterns import Pattern, compile_patterns
from dspark_cli.server.logscan import LogSnapshot

NAME = "draft_params"


@dataclass(frozen=True)
class DraftParams:
    """The load line's pattern (named group `params`) and the pinned count."""

    pattern: Pattern
    expected: int


def draft_params_spec(cfg: DictConfig) -> DraftParams | None:
    """The pin to hold a DSpark launch to; None without a pin or without DSpark."""
    pinned = cfg.model.expected.get("draft_params")
    if pinned is None or cfg.speculative.method != "dspark":
        return None
    try:
        (pattern,) = compile_patterns({NAME: cfg.logs.draft_params})
    except ValueError as exc:
        raise UsageError(f"`logs.draft_params`: {exc}") from None
    if "params" not in pattern.regex.groupindex:
        raise UsageError("`logs.draft_params` needs a named group `(?P<params>...)`.")
    return DraftParams(pattern, int(pinned))


def seen_params(spec: DraftParams, log: LogSnapshot) -> dict[str, Any]:
    """What the log showed against the pin: params (None: no load line), expected, line, ok,
    and a sentence (a count one short names the confidence head)."""
    match = log.found.get(spec.pattern.name)
    params = int(match.groups.get("params") or -1) if match is not None else None
    if params is None:
        sentence = f"no line matched {spec.pattern.regex.pattern!r}"
    elif params == spec.expected:
        sentence = f"DSpark draft loaded {params} params (pinned {spec.expected})"
    else:
        hint = (" (one fewer: is the confidence head missing?)"
                if params == spec.expected - 1 else "")
        sentence = f"DSpark draft loaded {params} params, pinned {spec.expected}{hint}"
    return {"params": params, "expected": spec.expected,
            "line": None if match is None else match.line_no,
            "ok": params == spec.expected, "sentence": sentence}
