"""The composed config as the schema's dataclasses: the one form every layer below the command
edge takes (`cli/` and `config/` are the only places that see OmegaConf).

`to_typed` runs once per command, after Hydra composed and the strict checks passed; from then on
a config is plain Python (dataclass instances, dicts, lists, enums), so a planner can be called
with a value built in a test, and nothing below the edge resolves an interpolation late.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from dspark_cli.errors import UsageError

T = TypeVar("T")
_ABSENT = object()


def to_typed(cfg: DictConfig) -> Any:
    """The composed config as its schema's dataclass instance (`OmegaConf.to_object`).

    A `???` the composition left unset (a group option with no default, such as
    model=deepseek_v4_local's path) is the user's to give: a usage error naming the key.
    Interpolations are resolved here, once: a config with a bench protocol refuses one outside
    `speculative` that reads `speculative.*`, which no arm would see as its own."""
    if "bench" in cfg:
        refuse_arm_references(cfg)
    try:
        return OmegaConf.to_object(cfg)
    except MissingMandatoryValue as e:
        raise missing_value(e) from None


def refuse_arm_references(cfg: DictConfig) -> None:
    """A bench arm is the config with its `speculative` group swapped for the arm's profile
    (bench/arms.py), after this conversion resolved every interpolation: a key elsewhere that
    reads `${speculative...}` would hold the composed profile's value in every arm, so a cell
    would launch what `dspark serve speculative=<arm>` does not. Refused, naming the keys."""
    found: list[str] = []

    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]")
        elif isinstance(node, str) and "${speculative." in node.replace(" ", ""):
            found.append(key)

    data = cast(dict, OmegaConf.to_container(cfg, resolve=False))  # a DictConfig's is a dict
    for key, value in data.items():
        if key != "speculative":
            walk(value, str(key))
    if found:
        keys = ", ".join(f"`{k}`" for k in found)
        raise UsageError(f"{keys} read `speculative.*`, but a bench swaps the speculative group "
                         "per arm after the config is resolved: every arm would get the composed "
                         "profile's value. Nothing was started.",
                         hint="write the value itself, or run each arm as "
                         "`dspark serve speculative=<arm>`.")


def values_of(cfg: DictConfig) -> Any:
    """The composed config's values as plain data, resolved where they resolve (an
    unresolvable interpolation surfaces where it is used): what secrets are learnt from."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException:
        return OmegaConf.to_container(cfg, resolve=False)


def missing_value(error: MissingMandatoryValue) -> UsageError:
    """The one message for a setting the command needs and nobody gave."""
    key = getattr(error, "full_key", "") or "a setting"
    return UsageError(f"`{key}` has no value, and this command needs one: the composed config "
                      "leaves it for you to give; nothing was started.", hint=f"add {key}=...")


def plain(value: Any) -> Any:
    """A typed config value as dicts, lists and scalars (enums as their values): for writers of
    JSON and YAML only (a run's config.yaml); every other reader takes the typed fields."""
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def to_yaml(data: Any) -> str:
    """Plain data as YAML, the way OmegaConf writes a config (config.yaml of a run)."""
    return OmegaConf.to_yaml(data)


def read_yaml(path: Path) -> Any:
    """A config file as plain data, interpolations left as written (conf/hw/*.yaml's `hw`
    section, an image group's pins): read, never composed."""
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def select(value: Any, dotted: str, default: Any = None) -> Any:
    """`a.b.c` looked up through dataclass fields and dict keys; `default` where a key is
    absent or a step on the way is None. For keys that are data, not code: a user's config
    names them (`smoke.conditional_lines[].when`), so they are only known at run time; the one
    lookup by name below the edge (code reads the typed fields)."""
    for key in dotted.split("."):
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif (dataclasses.is_dataclass(value)
              and key in {f.name for f in dataclasses.fields(value)}):
            value = getattr(value, key)
        else:
            return default
    return value


def with_group(cfg: T, group: str, schema: type, path: Path) -> T:
    """`cfg` with one group replaced by a group option's file (a bench arm's
    speculative/<arm>.yaml), read through its schema and resolved against the whole config (a
    profile's `${logs.evidence.<name>}`), as Hydra would have composed it: a wrong key or type
    is a usage error naming the file."""
    try:
        whole = OmegaConf.structured(cfg)
        whole[group] = OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.load(path))
        return OmegaConf.to_object(whole)  # type: ignore[return-value]
    except (OmegaConfBaseException, OSError) as e:
        raise UsageError(f"{group} profile {path} does not fit its schema: {e}") from None
