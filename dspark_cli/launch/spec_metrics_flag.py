"""Ask vLLM for per-request speculative-decoding metrics in the launch the smoke or a bench
arm boots (`--per-request-spec-decode-metrics`), so its answers show whether verification
trimmed (`server/spec_metrics.py` reads them back).

Added only where it can work: the arm speculates (vLLM refuses the flag without a speculative
config) and the vLLM planned for has the option (its own option table, never assumed). It goes
into the config's `serving.extra_args` before planning, so the plan renders it, vLLM's
validation judges it and the run record's command carries it, like every other flag. A level
the config already sets there is kept as it is.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any

from omegaconf import DictConfig, open_dict

from dspark_cli.config.plain import plain
from dspark_cli.errors import UsageError
from dspark_cli.launch import vllm_options

OPTION = "per_request_spec_decode_metrics"
FLAG = "--per-request-spec-decode-metrics"


@dataclass(frozen=True)
class MetricsAsk:
    """What the launch asks of vLLM: `level` (None: nothing, and `why`), set by `by`."""

    level: str | None
    by: str = ""
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ask_spec_metrics(cfg: DictConfig, level: str | None, key: str
                     ) -> tuple[DictConfig, MetricsAsk]:
    """`cfg` with the flag at `level` (the setting `key`) where it applies, and what was
    asked; a level the installed vLLM does not offer is a UsageError."""
    if cfg.speculative.method is None:
        return cfg, MetricsAsk(None, why="no speculative decoding (vLLM refuses the flag "
                               "without it)")
    for name, value in plain(cfg.serving.extra_args).items():
        option = vllm_options.resolve(name)
        if option is not None and option.dest == OPTION:
            asked = None if value in (None, "none") else str(value)
            return cfg, MetricsAsk(asked, f"serving.extra_args.{name}",
                                   "" if asked else f"`serving.extra_args.{name}` is {value}")
    if level is None:
        return cfg, MetricsAsk(None, why=f"`{key}` is null")
    entry = vllm_options.table().get(OPTION)
    if entry is None:
        return cfg, MetricsAsk(None, why=f"{vllm_options.source().vllm()} has no {FLAG}")
    if entry.get("choices") and level not in entry["choices"]:
        raise UsageError(f"`{key}={level}`: {FLAG} takes one of "
                         f"{', '.join(entry['choices'])}.")
    out = copy.deepcopy(cfg)
    with open_dict(out.serving.extra_args):
        out.serving.extra_args[OPTION] = level
    return out, MetricsAsk(level, f"dspark (`{key}`)")


def as_started(cfg: DictConfig, ask: MetricsAsk) -> MetricsAsk:
    """What the server that answers was asked: an attached server or a replaced command was
    started without the planned flags (its answers are still read if they carry metrics)."""
    if cfg.server.url:
        return MetricsAsk(None, why=f"attached: the server's own flags decide (start it with "
                          f"{FLAG} detailed to show trimming)")
    if cfg.server.command:
        return MetricsAsk(None, why="server.command replaces the planned vLLM command, which "
                          "asks for them")
    return ask
