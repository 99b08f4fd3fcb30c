"""The server log patterns config names (`logs.fatal`, `logs.degraded`, `logs.evidence`,
`logs.fallbacks`: name -> regex, null switched off), compiled once and checked while the config
is read.

Apart from logscan.py so the matching there stays config-free: it takes compiled `Pattern`s,
and a broken regex is a usage error (exit 2) naming its key before any server starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from dspark_cli.errors import UsageError


@dataclass(frozen=True)
class Pattern:
    """A named regular expression, searched anywhere in a line."""

    name: str
    regex: re.Pattern[str]

    def search(self, line: str) -> re.Match[str] | None:
        return self.regex.search(line)


def compile_patterns(patterns: Mapping[str, str]) -> tuple[Pattern, ...]:
    """Compile config patterns, keeping their order; ValueError names the one that is broken."""
    out = []
    for name, text in patterns.items():
        try:
            out.append(Pattern(str(name), re.compile(str(text))))
        except re.error as exc:
            raise ValueError(f"log pattern {name!r} is not a valid regex: {exc}") from exc
    return tuple(out)


def fatal_patterns(logs: Any) -> tuple[Pattern, ...]:
    """The `logs.fatal` patterns of a composed config (null ones are switched off); a broken
    regex is a usage error naming its key."""
    return _enabled(logs, "fatal")


def degraded_patterns(logs: Any) -> tuple[Pattern, ...]:
    """The `logs.degraded` patterns (vLLM overrode what was asked: not fatal), watched like
    required lines; null ones are switched off."""
    return _enabled(logs, "degraded")


def evidence_patterns(logs: Any) -> tuple[Pattern, ...]:
    """The `logs.evidence` patterns (an asked-for feature ran), watched like required lines;
    null ones are switched off."""
    return _enabled(logs, "evidence")


def fallback_patterns(logs: Any) -> tuple[Pattern, ...]:
    """The `logs.fallbacks` patterns (speculative decoding ran other than asked), watched like
    required lines; null ones are switched off."""
    return _enabled(logs, "fallbacks")


def _enabled(logs: Any, key: str) -> tuple[Pattern, ...]:
    enabled = {k: v for k, v in (OmegaConf.to_container(logs[key]) or {}).items()
               if v is not None}
    try:
        return compile_patterns(enabled)
    except ValueError as exc:
        raise UsageError(f"`logs.{key}`: {exc}") from None
