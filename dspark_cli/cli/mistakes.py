"""A config mistake Hydra or OmegaConf found while composing, said for a person: one paragraph
that names the override, what is wrong and what was probably meant, never Hydra's search path,
OmegaConf's node types or a stack trace. The plain dry run (Compose API) and every other run
(`@hydra.main`) send their composition errors here, so both say the same."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Sequence
from typing import Any

from dspark_cli.cli.override_keys import suggestion
from dspark_cli.config import catalog
from dspark_cli.errors import UsageError

_NOTHING = " Nothing was started."
# What a value of each OmegaConf node type must be, in words.
_TAKES = {"IntegerNode": "an integer", "FloatNode": "a number", "BooleanNode": "true or false",
          "StringNode": "a string", "PathNode": "a path", "BytesNode": "bytes"}


def closest(word: str, names: Sequence[str]) -> list[str]:
    """The names `word` most likely meant: those it begins, else difflib's closest (every name
    that ties for the best score, at most two: `mi35x` -> mi350x, mi355x)."""
    started = [n for n in names if n.startswith(word)] if word else []
    if started:
        return started[:2]
    scored = sorted(((difflib.SequenceMatcher(None, word, n).ratio(), n) for n in names),
                    key=lambda sn: (-sn[0], sn[1]))
    best = [n for score, n in scored if score >= 0.6 and score == scored[0][0]]
    return best[:2]


def _meant(candidates: Sequence[str]) -> str:
    return " or ".join(f"`{c}`" for c in candidates)


def _override_of(key: str, overrides: Sequence[str]) -> str | None:
    """The override (as typed) that sets `key` or picks its group, if one does."""
    for line in overrides:
        name = line.partition("=")[0].lstrip("+~").removeprefix("override ").split("@")[0]
        if name == key:
            return line
    return None


def unknown_option(group: str, option: str, overrides: Sequence[str],
                   command: str) -> UsageError:
    """`+hw=mi35x`: the close options, and all of the group's."""
    names = catalog.option_names(group)
    typed = _override_of(group, overrides) or f"{group}={option}"
    if not names:
        groups = catalog.all_groups()
        close = [typed.replace(group, g, 1) for g in closest(group, groups)]
        meant = f"; did you mean {_meant(close)}?" if close else "."
        return UsageError(f"`{typed}`: there is no config group {group!r}{meant} The groups: "
                          f"{', '.join(groups)}.{_NOTHING}")
    prefix = typed.partition("=")[0]
    close = [f"{prefix}={c}" for c in closest(option, names)]
    meant = f"; did you mean {_meant(close)}?" if close else "."
    return UsageError(f"`{typed}`: {group} has no option {option!r}{meant} The {group} options: "
                      f"{', '.join(names)}.{_NOTHING}",
                      hint=f"`dspark {command} --help` says what each {group} option is")


def _fields_of(kind: object) -> list[str]:
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return [f.name for f in dataclasses.fields(kind)]
    return []


def _unknown_key(error: Exception, overrides: Sequence[str]) -> UsageError:
    key = str(getattr(error, "full_key", "") or getattr(error, "key", ""))
    typed = _override_of(key, overrides)
    value = typed.partition("=")[2] if typed else None
    leaf = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(leaf, _fields_of(getattr(error, "object_type", None)),
                                      n=2)
    groups = [] if "." in key or value is None else closest(leaf, catalog.all_groups())
    meant = (f"; did you mean {_meant([f'{g}={value}' for g in groups])}?" if groups
             else suggestion(key, value, close))
    return UsageError(f"`{key}` is not a setting{meant or '.'} Free-form settings live under "
                      "env, extra and extra_args; docs/configuration.md lists the groups and "
                      f"keys.{_NOTHING}")


def _wrong_value(error: Exception, overrides: Sequence[str]) -> UsageError:
    key = str(getattr(error, "full_key", ""))
    value = getattr(error, "value", None)
    node: Any = getattr(error, "child_node", None)  # OmegaConf's node, told apart by name
    typed = _override_of(key, overrides) or f"{key}={value}"
    kind = type(node).__name__
    if kind == "EnumNode":
        allowed = list(node.enum_type.__members__)  # the schema's closed set
        close = [f"{key}={c}" for c in closest(str(value), allowed)]
        meant = f"; did you mean {_meant(close)}?" if close else "."
        return UsageError(f"`{typed}`: {key} is one of {', '.join(allowed)}, not {value!r}"
                          f"{meant}{_NOTHING}")
    if value is None:
        return UsageError(f"`{typed}`: {key} cannot be null; give it a value (or set the keys "
                          f"under it one by one).{_NOTHING}")
    takes = _TAKES.get(kind)
    if takes is None:  # a group of settings (a dict node) given a plain value
        return UsageError(f"`{typed}`: {key} is a group of settings, not a single value; set "
                          f"the keys under it (`dspark <command> --cfg job` shows them)."
                          f"{_NOTHING}")
    return UsageError(f"`{typed}`: {key} takes {takes}, and {value!r} is not one.{_NOTHING}")


def usage_error(error: Exception, overrides: Sequence[str], command: str,
                sweeping: bool = False) -> UsageError:
    """The paragraph for a Hydra or OmegaConf error raised while `dspark <command>` composed
    `overrides` (`sweeping`: as one job of a sweep, which has its own value of each swept key)."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    swept = _sweep(overrides)
    if sweeping:
        overrides = [o for o in overrides if _sweep([o]) is None]
    elif swept is not None:
        key, _, value = swept.partition("=")
        return UsageError(f"`{swept}`: a comma makes several values, one run each, which only "
                          f"a sweep (-m) runs; for one value that is a list write "
                          f"{key}=[{value}], for a string with a comma quote it: "
                          f"{key}='{value}'.{_NOTHING}")
    if isinstance(error, MissingConfigException):
        group, _, option = str(error.missing_cfg_file or "").rpartition("/")
        if group:
            return unknown_option(group, option, overrides, command)
    cause = error.__cause__ if error.__cause__ is not None else error
    if isinstance(cause, ConfigAttributeError | ConfigKeyError):
        return _unknown_key(cause, overrides)
    if isinstance(cause, ValidationError) and getattr(cause, "full_key", None):
        return _wrong_value(cause, overrides)
    return UsageError(_plain(str(error)) + _NOTHING)


def unresolved(error: Exception) -> UsageError:
    """The paragraph for an interpolation that does not resolve (`${oc.env:UNSET}`,
    `${no.such.key}`), naming the key that holds it."""
    key = str(getattr(error, "full_key", "") or "a setting")
    why = _plain(str(error)).removeprefix("KeyError raised while resolving interpolation: ")
    return UsageError(f"`{key}` cannot be resolved: {why}.{_NOTHING}",
                      hint="set the variable it reads, give it a default "
                      "(`${oc.env:NAME,default}`), or read a key that exists")


def _sweep(overrides: Sequence[str]) -> str | None:
    """The first override that is a sweep (`a=1,2`), as Hydra's grammar reads it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for line in overrides:
        try:
            if parser.parse_override(line).is_sweep_override():
                return line
        except HydraException:
            continue  # unreadable: check_syntax says so
    return None


def _plain(text: str) -> str:
    """Hydra's message without its search path, its HYDRA_FULL_ERROR advice and OmegaConf's
    node details, in one paragraph."""
    text = re.split(r"\n\s*(Config search path:|full_key:|Set the environment variable)",
                    text)[0]
    text = text.replace("--multirun", "-m")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " ".join(lines)
