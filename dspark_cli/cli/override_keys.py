"""A mistyped key set without `+` (`serving.extra_argz.x=1`): Hydra refuses it and suggests
`+serving.extra_argz.x=1`, which would add the typo as a new key (and then be refused by the
schema). Checked against the schema before composing, it gets a did-you-mean instead: the key
where the schema has that name (`serving.max_num_seqs` -> `serving.args.max_num_seqs`), else
the close names at that level."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Iterable

from dspark_cli.config.schema import LaunchConf
from dspark_cli.config.strict import dataclass_of, placements
from dspark_cli.errors import UsageError


def _unknown(key: str) -> tuple[str, list[str]] | None:
    """(the first unknown dotted prefix, close field names) of a launch setting's key; None
    when the schema has it, or it is not a launch setting (a command's own group, hydra)."""
    parts = key.split(".")
    kind: type | None = LaunchConf
    for i, part in enumerate(parts):
        if kind is None:
            return None
        fields = {f.name: f for f in dataclasses.fields(kind)}
        if part not in fields:
            if i == 0:
                return None
            return ".".join(parts[:i + 1]), difflib.get_close_matches(part, sorted(fields), n=2)
        kind = dataclass_of(typing.get_type_hints(kind)[part])
    return None


def suggestion(key: str, value: str | None, close: Iterable[str]) -> str:
    """`; did you mean ...?` for a key the schema lacks: the keys that carry its last name
    (with the value, ready to paste), else the close names; empty when there is none."""
    leaf = key.rsplit(".", 1)[-1]
    moved = sorted(placements(leaf), key=lambda k: not k.startswith(key.split(".")[0] + "."))
    if moved:
        meant = [f"{k}={value}" if value is not None else k for k in moved[:2]]
    else:
        parent = key.rsplit(".", 1)[0] + "." if "." in key else ""
        meant = [f"{parent}{c}" for c in close]
    return f"; did you mean {' or '.join(f'`{m}`' for m in meant)}?" if meant else ""


# Hydra looks a key up as a file name (is `hw.env.X` a config group?), which a filesystem caps
# at 255 bytes: a longer key would end in OSError, not in an answer.
MAX_KEY_BYTES = 240


def _check_length(key: str) -> None:
    name = key.lstrip("+~").partition("@")[0]
    longest = max((len(part.encode()) for part in name.split("/")), default=0)
    if longest > MAX_KEY_BYTES:
        raise UsageError(f"`{name[:40]}...`: a key of {longest} bytes is longer than any "
                         f"setting or variable name dspark takes ({MAX_KEY_BYTES} at most, "
                         "dots included). Nothing was started.")


def check_override_keys(overrides: Iterable[str]) -> None:
    """UsageError naming the setting meant by a dotted key the schema lacks."""
    for line in overrides:
        key, sep, value = line.partition("=")
        _check_length(key)
        if key == "runtime.expected" and value.strip() == "{}":
            # Hydra merges a map into the pins: `{}` would leave every pin as it is.
            raise UsageError("`runtime.expected={}` would change no pin (a map is merged into "
                             "the pins, not put in their place); `runtime.expected=null` "
                             "switches every pin off, `runtime.expected.<pin>=null` one.")
        if not sep or key.startswith(("+", "~")) or "." not in key or "@" in key:
            continue
        found = _unknown(key)
        if found is not None:
            wrong, close = found
            where = f" (in `{key}`)" if key != wrong else ""
            meant = suggestion(wrong, value if key == wrong else None, close)
            raise UsageError(f"`{wrong}` is not a setting{where}{meant or '.'}"
                             " Free-form settings live under env, extra and extra_args; "
                             "docs/configuration.md lists the groups and keys.")
