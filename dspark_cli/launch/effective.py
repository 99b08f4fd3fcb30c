"""The launch as vLLM will receive it, read back from the rendered argv and env.

Rules judge this, never the config fields that produced it: whatever a profile, an override or
a free-form map put into the command, "adaptive" means the rendered `--speculative-config`
enables it, "eager" means the rendered command has `--enforce-eager`, and so on. Read off it as
well (pure): which decode batches vLLM runs without CUDA graphs (`coverage`).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from dspark_cli.launch import vllm_options
from dspark_cli.launch.plan import LaunchPlan

FULL_CUDAGRAPH_MODES = frozenset({"FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"})


def read_argv(argv: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """`vllm serve MODEL --x ...` as {dest: value} the way vLLM's parser reads it: `--x` of a
    boolean is True, `--no-x` False, a list option takes values up to the next option; the
    speculative and compilation configs are parsed JSON. The model is under `model_tag`."""
    args: dict[str, Any] = {}
    rest = list(argv[2:]) if argv[:2] in (("vllm", "serve"), ["vllm", "serve"]) else list(argv)
    if rest and not rest[0].startswith("--"):
        args["model_tag"] = rest.pop(0)
    i = 0
    while i < len(rest):
        token = rest[i]
        i += 1
        if not token.startswith("--"):
            continue  # a stray value: vLLM's own validation rejects it
        name, _, inline = token[2:].partition("=")
        option = vllm_options.resolve(name)
        dest = option.dest if option else vllm_options.normalize(name).replace("-", "_")
        values = [inline] if inline else []
        while not inline and i < len(rest) and not rest[i].startswith("--"):
            values.append(rest[i])
            i += 1
        if option is not None and option.kind in ("bool", "flag") and not values:
            args[dest] = not option.negated
        elif option is not None and option.kind == "list":
            args[dest] = values
        else:
            args[dest] = values[0] if len(values) == 1 else (values or True)
    for dest in ("speculative_config", "compilation_config"):
        if isinstance(args.get(dest), str):
            with contextlib.suppress(json.JSONDecodeError):  # vLLM's validation rejects it
                args[dest] = json.loads(args[dest])
    return args


def _int(value: Any, default: int = 1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


@dataclass(frozen=True)
class EffectiveLaunch:
    """What vLLM will run: its options by dest (as parsed from the argv) and its environment."""

    args: dict[str, Any]
    env: dict[str, str]

    @classmethod
    def of(cls, plan: LaunchPlan) -> EffectiveLaunch:
        return cls(read_argv(plan.argv), plan.env_map)

    def arg(self, dest: str, default: Any = None) -> Any:
        return self.args.get(dest, default)

    @property
    def speculative(self) -> dict[str, Any]:
        spec = self.args.get("speculative_config")
        return spec if isinstance(spec, dict) else {}

    @property
    def compilation(self) -> dict[str, Any]:
        comp = self.args.get("compilation_config")
        return comp if isinstance(comp, dict) else {}

    @property
    def method(self) -> str | None:
        return self.speculative.get("method")

    @property
    def adaptive(self) -> bool:
        return self.speculative.get("enable_adaptive_verification") is True

    @property
    def draft_model(self) -> str | None:
        return self.speculative.get("model")

    @property
    def num_speculative_tokens(self) -> Any:
        return self.speculative.get("num_speculative_tokens")

    @property
    def eager(self) -> bool:
        return self.args.get("enforce_eager") is True

    @property
    def cudagraph_mode(self) -> str | None:
        """The CUDA graph mode vLLM runs: none when eager, else the compilation config's."""
        if self.eager:
            return "NONE"
        mode = self.compilation.get("cudagraph_mode")
        return str(mode).upper() if mode is not None else None

    @property
    def full_cudagraphs(self) -> bool:
        return self.cudagraph_mode in FULL_CUDAGRAPH_MODES

    def size(self, dest: str) -> int:
        return _int(self.args.get(dest))

    @property
    def parallel(self) -> int:
        return (self.size("tensor_parallel_size") * self.size("data_parallel_size")
                * self.size("pipeline_parallel_size"))


# -- which decode batches vLLM runs without CUDA graphs ------------------------------------
# With speculative decoding a decode step of n requests is n x (1 + K) tokens, and vLLM
# captures CUDA graphs up to a number of *tokens*: `max_cudagraph_capture_size`, rounded down
# to its capture grid (1, 2, 4, 8..248 by 8, 256.. by 16) and to `max_num_batched_tokens` (vLLM
# then logs "Truncating max_cudagraph_capture_size to %d"), or the explicit
# `cudagraph_capture_sizes`. Left unset, vLLM's default stops at 512 tokens (1024 on
# Blackwell), so a speculating server with `max_num_seqs` 256 and K = 7 runs every batch above
# 64 requests eagerly, logging nothing. Mirrors `VllmConfig._set_cudagraph_sizes` of vLLM 0.32
# (config/vllm.py).
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


def _maybe_int(value: object) -> int | None:
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
    k = _maybe_int(launch.num_speculative_tokens)
    mode = launch.cudagraph_mode
    if not k or k <= 0 or launch.eager or mode in ("NONE", "PIECEWISE"):
        return None
    seqs = _maybe_int(launch.arg("max_num_seqs"))
    if seqs is None:
        return None
    q = k + 1
    batched = _maybe_int(launch.arg("max_num_batched_tokens"))
    comp = launch.compilation
    sizes = comp.get("cudagraph_capture_sizes")
    explicit = _maybe_int(comp.get("max_cudagraph_capture_size"))
    if isinstance(sizes, list) and sizes:
        kept = [s for s in (_maybe_int(x) for x in sizes)
                if s and (batched is None or s <= batched)]
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
