"""The `smoke` section's schema: a typo'd key or a wrong type fails while Hydra composes.

The log patterns are data here, not code: the shared `logs.fatal` patterns (conf/logs/) end
the smoke the moment one matches; `startup_lines` (regexes) must appear on every server, and
each profile adds its own through `hw/model/speculative.expect_log`; `conditional_lines` add
lines only when the composed config matches (`when: {dotted.key: value}`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from dspark_cli.config.schema import LaunchConf, store_schema


@dataclass
class ConditionalLines:
    # Dotted config keys and the value each must have (a list: any of them).
    when: dict[str, Any] = MISSING
    lines: list[str] = MISSING


@dataclass
class SmokeConf:
    prompt: str = MISSING
    max_tokens: int = 48
    # No progress within this long is a queue hang (its own verdict).
    request_timeout_s: float = 120.0
    metrics_timeout_s: float = 10.0
    startup_lines: list[str] = field(default_factory=list)
    conditional_lines: list[ConditionalLines] = field(default_factory=list)


@dataclass
class SmokePrimary(LaunchConf):
    smoke: SmokeConf = field(default_factory=SmokeConf)


def register() -> None:
    """Register the `dspark smoke` primary schema (the launch schema plus `smoke`)."""
    store_schema("smoke_schema", SmokePrimary)
