"""The closed sets of values some config keys take (`hw.platform`, `hw.layout`,
`compilation.cudagraph_mode`, `speculative.draft_tokens_rule`).

OmegaConf refuses any other value while Hydra composes. Apart from schema.py so machine
detection, the launch rules, smoke and bench name a choice without the schema's dataclasses.
"""

from dspark_cli.compat import StrEnum


class Platform(StrEnum):
    rocm = "rocm"
    cuda = "cuda"
    cpu = "cpu"


class CudagraphMode(StrEnum):
    NONE = "NONE"
    PIECEWISE = "PIECEWISE"
    FULL = "FULL"
    FULL_DECODE_ONLY = "FULL_DECODE_ONLY"
    FULL_AND_PIECEWISE = "FULL_AND_PIECEWISE"


class Layout(StrEnum):
    """How vLLM spans more than one node (`hw.nodes` > 1)."""

    dp = "dp"  # data parallel, one API server on the head, the other nodes headless
    dp_hybrid = "dp_hybrid"  # data parallel, an API server on every node (hybrid load balancing)
    tp = "tp"  # one engine whose tensor parallel group spans the nodes


class DraftTokensRule(StrEnum):
    """How `spec_decode_num_draft_tokens` relates to drafts x K for a drafter."""

    exact = "exact"  # fixed-K drafters: DSpark, draft_model
    at_most = "at_most"  # ngram, suffix: may propose fewer than K
