"""Composed config -> what the smoke expects of this server (pure; bad config is a UsageError).

Required startup lines come from the `smoke` section (every server) and from the profiles
(`hw/model/speculative.expect_log`), plus `smoke.conditional_lines` whose `when` matches the
composed config. The spec-decode rule comes from the speculative profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from dspark_cli.config.choices import DraftTokensRule
from dspark_cli.config.typed import select
from dspark_cli.errors import UsageError
from dspark_cli.server.logscan import (
    DraftParams,
    Pattern,
    compile_patterns,
    degraded_patterns,
    draft_params_spec,
    evidence_patterns,
    fallback_patterns,
    fatal_patterns,
)

if TYPE_CHECKING:
    from dspark_cli.config.smoke import SmokePrimary

PROFILE_GROUPS = ("hw", "model", "speculative")
_ABSENT = object()


@dataclass(frozen=True)
class SpecRule:
    """What the spec-decode counters must satisfy."""

    method: str
    k: int | None
    rule: DraftTokensRule


@dataclass(frozen=True)
class StepsExpect:
    """What the launch's verify steps must show (`server/metrics.py`: adaptive trims,
    fixed K proposes K every step)."""

    expected: str | None


@dataclass(frozen=True)
class Expectations:
    prompt: str
    max_tokens: int
    request_timeout_s: float
    metrics_timeout_s: float
    fatal: tuple[Pattern, ...]
    required: tuple[Pattern, ...]  # each named by its regex
    draft_params: DraftParams | None
    spec: SpecRule | None
    context_lines: int
    # Data parallel engines behind the API (a multi-node layout's DP size): with more than one,
    # the smoke sends `requests` at once so that every engine gets work, and checks each did.
    engines: int = 1
    # Lines where vLLM overrode what was asked (`logs.degraded`): reported, never a failure.
    degraded: tuple[Pattern, ...] = ()
    # What the verify steps must show: set by the smoke once the launch is planned.
    steps: StepsExpect | None = None
    # Lines that show a feature ran (`logs.evidence`, by family), and the families this
    # configuration's required lines name (the profile expects them).
    evidence: tuple[Pattern, ...] = ()
    expected_evidence: tuple[str, ...] = ()
    # The stall watch's threshold (`watch.stall_s`; None: off).
    stall_s: float | None = None
    # Lines where speculative decoding ran other than asked (`logs.fallbacks`), and whether the
    # launch asked for adaptive verification (then one of them fails the smoke).
    fallbacks: tuple[Pattern, ...] = ()
    adaptive: bool = False
    # The draft is pinned exact (`model.expected.draft_exact`): the counters show trimming.
    exact_draft: bool = False

    @property
    def requests(self) -> int:
        """Concurrent smoke requests: one per server, two per engine when there are several."""
        return 1 if self.engines == 1 else 2 * self.engines

    @property
    def watch(self) -> tuple[Pattern, ...]:
        """Every line pattern the log watcher records a first match of."""
        extra = (self.draft_params.pattern,) if self.draft_params is not None else ()
        return self.required + extra + self.degraded + self.evidence + self.fallbacks


def condition_holds(cfg: SmokePrimary, when: dict[str, Any], where: str) -> bool:
    """Every dotted key has the wanted value (a list: any of them); unknown keys are errors.
    The keys are the user's (`smoke.conditional_lines[].when`), so they are looked up by name."""
    for key, wanted in when.items():
        value = select(cfg, key, default=_ABSENT)
        if value is _ABSENT:
            raise UsageError(f"`{where}.when` names `{key}`, which is not a config key.")
        options = wanted if isinstance(wanted, list) else [wanted]
        if str(value.value if isinstance(value, Enum) else value) not in {str(o) for o in options}:
            return False
    return True


def required_lines(cfg: SmokePrimary) -> list[str]:
    """Regexes of the startup lines this configuration must print, in order, without repeats."""
    lines = list(cfg.smoke.startup_lines)
    for group in PROFILE_GROUPS:
        lines += list(getattr(cfg, group).expect_log)
    for i, rule in enumerate(cfg.smoke.conditional_lines):
        if condition_holds(cfg, rule.when, f"smoke.conditional_lines[{i}]"):
            lines += list(rule.lines)
    return list(dict.fromkeys(str(line) for line in lines))


def _compile(patterns: dict[str, str], where: str) -> tuple[Pattern, ...]:
    try:
        return compile_patterns(patterns)
    except ValueError as exc:
        raise UsageError(f"`{where}`: {exc}") from None


def expectations(cfg: SmokePrimary) -> Expectations:
    """What the smoke checks on this configuration."""
    smoke = cfg.smoke
    if int(smoke.max_tokens) <= 0:
        raise UsageError(f"`smoke.max_tokens` must be positive, not {smoke.max_tokens}.")
    spec = cfg.speculative
    rule = None
    if spec.method is not None:
        k = spec.num_speculative_tokens
        rule = SpecRule(str(spec.method), None if k is None else int(k),
                        DraftTokensRule(spec.draft_tokens_rule))
    lines = required_lines(cfg)
    evidence = evidence_patterns(cfg.logs)
    return Expectations(
        prompt=str(smoke.prompt),
        max_tokens=int(smoke.max_tokens),
        request_timeout_s=float(smoke.request_timeout_s),
        metrics_timeout_s=float(smoke.metrics_timeout_s),
        fatal=fatal_patterns(cfg.logs),
        degraded=degraded_patterns(cfg.logs),
        required=_compile({line: line for line in lines}, "expect_log"),
        draft_params=draft_params_spec(cfg),
        spec=rule,
        context_lines=int(cfg.logs.context_lines),
        evidence=evidence,
        expected_evidence=tuple(p.name for p in evidence if p.regex.pattern in lines),
        fallbacks=fallback_patterns(cfg.logs),
        exact_draft=cfg.model.expected.draft_exact is True,
        stall_s=float(stall) if (stall := cfg.watch.stall_s) else None,
    )
