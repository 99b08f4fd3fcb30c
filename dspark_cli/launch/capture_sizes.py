"""Which decode batches vLLM runs without CUDA graphs, read off the rendered launch (pure).

With speculative decoding a decode step of n requests is n x (1 + K) tokens, and vLLM captures
CUDA graphs up to a number of *tokens*: `max_cudagraph_capture_size`, rounded down to its
capture grid (1, 2, 4, 8..248 by 8, 256.. by 16) and to `max_num_batched_tokens` (vLLM then
logs "Truncating max_cudagraph_capture_size to %d"), or the explicit `cudagraph_capture_sizes`.
Left unset, vLLM's default stops at 512 tokens (1024 on Blackwell), so a speculating server
with `max_num_seqs` 256 and K = 7 runs every batch above 64 requests eagerly, logging nothing.
Mirrors `VllmConfig._set_cudagraph_sizes` of vLLM 0.32 (config/vllm.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from dspark_cli.launch.effective import EffectiveLaunch

DEFAULT_CEILING = 512  # vLLM's default capture ceiling in tokens
BLACKWELL_CEILING = 1024  # on device capability family 100


@dataclass(frozen=True)
class Coverage:
    """How far the captured graphs reach, in tokens and in requests."""

    query_len: int  # 1 + K: tokens per request in a decode step
    max_num_seqs: int
    covered_tokens: int  # the largest captured size
    source: str  # which setting decided it, for the message

    @property
    def covered_requests(self) -> int:
        return self.covered_tokens // self.query_len

    @property
    def needed_tokens(self) -> int:
        return self.max_num_seqs * self.query_len

    def problem(self) -> str | None:
        """The batches that run eagerly, or None when every batch is captured."""
        if self.covered_requests >= self.max_num_seqs:
            return None
        first = self.covered_requests + 1
        return (f"with K = {self.query_len - 1}, a decode step of max_num_seqs = "
                f"{self.max_num_seqs} requests is {self.max_num_seqs} x {self.query_len} = "
                f"{self.needed_tokens} tokens, but CUDA graphs are captured up to "
                f"{self.covered_tokens} tokens ({self.source}): batches of {first} to "
                f"{self.max_num_seqs} requests run eagerly; raise max_cudagraph_capture_size to "
                f"{self.needed_tokens} or more (and max_num_batched_tokens with it), or lower "
                "max_num_seqs")


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def grid(max_size: int, max_num_batched_tokens: int | None) -> list[int]:
    """vLLM's capture sizes for an explicit `max_cudagraph_capture_size`."""
    top = min(max_size, max_num_batched_tokens) if max_num_batched_tokens else max_size
    sizes = [i for i in (1, 2, 4) if i <= top]
    if top >= 8:
        sizes += list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes += list(range(256, top + 1, 16))
    if max_num_batched_tokens and max_num_batched_tokens <= top:
        sizes.append(max_num_batched_tokens)
    return sorted(set(sizes))


def coverage(launch: EffectiveLaunch, blackwell: bool = False) -> Coverage | None:
    """The launch's graph coverage; None where the rule does not apply (no speculation, no
    CUDA graphs, graphs only piecewise) or `max_num_seqs` is left to vLLM's device default."""
    k = _int(launch.num_speculative_tokens)
    mode = launch.cudagraph_mode
    if not k or k <= 0 or launch.eager or mode in ("NONE", "PIECEWISE"):
        return None
    seqs = _int(launch.arg("max_num_seqs"))
    if seqs is None:
        return None
    q = k + 1
    batched = _int(launch.arg("max_num_batched_tokens"))
    comp = launch.compilation
    sizes = comp.get("cudagraph_capture_sizes")
    explicit = _int(comp.get("max_cudagraph_capture_size"))
    if isinstance(sizes, list) and sizes:
        kept = [s for s in (_int(x) for x in sizes) if s and (batched is None or s <= batched)]
        return Coverage(q, seqs, max(kept, default=0), "the largest of cudagraph_capture_sizes")
    if explicit is not None:
        captured = grid(explicit, batched)
        top = captured[-1] if captured else 0
        source = f"max_cudagraph_capture_size = {explicit}" + (
            f", truncated to {top}" if top != explicit else "")
        return Coverage(q, seqs, top, source)
    ceiling = BLACKWELL_CEILING if blackwell else DEFAULT_CEILING
    top = min(seqs * q * 2, ceiling, batched or ceiling)
    return Coverage(q, seqs, top, f"vLLM's default ceiling of {ceiling} tokens, as "
                    "max_cudagraph_capture_size is unset")
