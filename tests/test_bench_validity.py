"""The validity rules (pure): each broken rule is a reason; only a clean cell is valid."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dspark_cli.bench.cell import Evidence, judge

CLEAN = Evidence(num_prompts=880, completed=880, failed=0, client_output_tokens=1_000_000,
                 server_generation_tokens=1_000_000.0, preemptions=0.0)


def test_a_clean_cell_is_valid() -> None:
    assert judge(CLEAN) == ()


@pytest.mark.parametrize(("change", "fragment"), [
    ({"server_generation_tokens": 1_000_003.0},
     "client counted 1000000 generated tokens, server 1000003"),
    ({"preemptions": 2.0}, "2 preemptions"),
    ({"failed": 1, "completed": 879}, "1 of 880 requests failed"),
    ({"completed": 870}, "870 of 880 requests completed"),
    ({"fatal_lines": ("rocm_memory_fault: Memory access fault by GPU node-2",)},
     "fatal server log line: rocm_memory_fault"),
    ({"server_generation_tokens": None}, "server counters (/metrics) unavailable"),
    ({"completed": None, "failed": None, "client_output_tokens": None},
     "no load-generator result"),
    ({"errors": ("boot: the server exited with code 1",)}, "boot: the server exited"),
])
def test_each_broken_rule_invalidates_the_cell(change: dict, fragment: str) -> None:
    reasons = judge(replace(CLEAN, **change))
    assert reasons and any(fragment in r for r in reasons), reasons


def test_every_broken_rule_is_kept_not_just_the_first() -> None:
    reasons = judge(replace(CLEAN, failed=3, completed=877, preemptions=1.0,
                            server_generation_tokens=5.0,
                            fatal_lines=("worker_died: Worker proc X died unexpectedly",)))
    assert len(reasons) == 5
