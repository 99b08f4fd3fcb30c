"""A protocol's inputs, checked before the first boot: the request set against its pin and the
lossless probe's pinned prompts. A real run stops on the first problem (exit 2 or 1); a dry run
reports each as a finding, so it says what the real run would refuse."""

from __future__ import annotations

from dataclasses import dataclass

from dspark_cli.bench.dataset import DatasetSpec, VerifiedDataset, verify
from dspark_cli.bench.lossless import PromptSet, load_prompts
from dspark_cli.bench.protocol import Protocol
from dspark_cli.errors import DsparkError
from dspark_cli.status import Finding, Status

REQUESTS_RULE, PROMPTS_RULE = "bench-request-set", "bench-lossless-prompts"


@dataclass(frozen=True)
class Inputs:
    dataset: VerifiedDataset
    prompts: PromptSet | None


def needed_rows(protocol: Protocol) -> int:
    """The most requests one phase sends: the request set must hold at least as many."""
    return max(p.num_prompts for c in protocol.cells for p in c.phases)


def checked_inputs(protocol: Protocol, dataset: DatasetSpec) -> Inputs:
    """Both inputs verified; the first problem raised as the run's error."""
    verified = verify(dataset, needed_rows(protocol))
    return Inputs(verified, None if protocol.lossless is None else load_prompts(protocol.lossless))


def input_findings(protocol: Protocol, dataset: DatasetSpec) -> tuple[Finding, ...]:
    """Each input's verdict as a preflight finding (a dry run's)."""
    found = []
    try:
        verified = verify(dataset, needed_rows(protocol))
        what = ("random prompts: no file to pin" if verified.sha256 is None else
                f"{verified.rows} requests, sha256 {verified.sha256} as pinned")
        found.append(Finding(REQUESTS_RULE, Status.passed, what, "bench.dataset"))
    except DsparkError as e:
        hint = f" ({e.hint})" if e.hint else ""
        found.append(Finding(REQUESTS_RULE, Status.failed, e.message + hint, "bench.dataset"))
    if protocol.lossless is not None:
        try:
            load_prompts(protocol.lossless)
            found.append(Finding(PROMPTS_RULE, Status.passed, "the pinned greedy prompts",
                                 "bench.lossless"))
        except DsparkError as e:
            found.append(Finding(PROMPTS_RULE, Status.failed, e.message, "bench.lossless"))
    return tuple(found)
