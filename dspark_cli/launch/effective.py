"""The launch as vLLM will receive it, read back from the rendered argv and env.

Rules judge this, never the config fields that produced it: whatever a profile, an override or
a free-form map put into the command, "adaptive" means the rendered `--speculative-config`
enables it, "eager" means the rendered command has `--enforce-eager`, and so on.
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
