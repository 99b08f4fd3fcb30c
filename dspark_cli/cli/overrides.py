"""Overrides as people type them, made into what Hydra reads, before Hydra sees them.

bash expands `~` only at the start of a word, not after `key=`, and Hydra's grammar has no `~`
inside a value: `model.path=~/models/x` reaches Hydra as a lexer error. `expand_home` turns a
value (bare or quoted) that starts with `~` or `~user` into the path, the way the shell would
have. `check_syntax` runs Hydra's own override parser, so that a value Hydra cannot read (an
apostrophe, unicode, JSON braces) is one line that shows the same override quoted, ready to
paste, instead of Hydra's lexer dump and its HYDRA_FULL_ERROR advice.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable
from typing import Any

from dspark_cli.errors import UsageError

# A value Hydra reads unquoted (a subset: letters, digits and the path characters).
_PLAIN = re.compile(r"[\w./@:+\-]*", re.ASCII)
# Characters a backslash keeps literal inside the shell's double quotes.
_DOUBLE_QUOTED_SPECIAL = re.compile(r'(["$`\\])')


def expand_home(overrides: Iterable[str],
                expanduser: Callable[[str], str] = os.path.expanduser) -> list[str]:
    """Each override with a leading `~`/`~user` in its value expanded (quoted or not); a `~`
    that names no known home is left for Hydra to refuse."""
    return [_expand(o, expanduser) for o in overrides]


def _expand(override: str, expanduser: Callable[[str], str]) -> str:
    key, eq, value = override.partition("=")
    if not eq:
        return override
    quote = value[:1] if value[:1] in "'\"" and value[-1:] == value[:1] and len(value) > 1 else ""
    inner = value[1:-1] if quote else value
    if not inner.startswith("~"):
        return override
    path = expanduser(inner)
    if path == inner:
        return override
    if quote:
        return f"{key}={quote}{path}{quote}"
    return f"{key}={hydra_value(path)}"


def hydra_value(text: str) -> str:
    """`text` as one Hydra value: bare when Hydra reads it so, else quoted."""
    if _PLAIN.fullmatch(text):
        return text
    quote = "'" if "'" not in text else '"'
    # Hydra's rule: a quote inside is escaped, and backslashes just before a quote (or before
    # the closing one) are doubled.
    body = re.sub(r"(\\*)" + quote, lambda m: m[1] * 2 + "\\" + quote, text)
    body = re.sub(r"(\\+)$", lambda m: m[1] * 2, body)
    return quote + body + quote


def hydra_literal(text: str) -> str:
    """`text` as one Hydra value that reads back as exactly `text`: quoted as `hydra_value`
    quotes, and an interpolation's `${` escaped (a folder named `e${oc.env:HOME}` is that
    name, not the home directory)."""
    return hydra_value(text.replace("${", "\\${"))


def shell_word(text: str) -> str:
    """`text` as one shell word, as readable as it can be."""
    if text and shlex.quote(text) == text:
        return text
    if "!" in text:  # history expansion inside double quotes, in an interactive bash
        return shlex.quote(text)
    return '"' + _DOUBLE_QUOTED_SPECIAL.sub(r"\\\1", text) + '"'


def _bad_key(parser: Any, key: str) -> bool:
    """Whether Hydra's grammar refuses `key` itself (with a plain value)."""
    from hydra.errors import OverrideParseException

    try:
        parser.parse_overrides([f"{key}=x"])
    except OverrideParseException:
        return True
    return False


def _key_problem(override: str, key: str) -> str:
    """The message for a key Hydra cannot read: each dotted part is an identifier (letters,
    digits and `_`, not starting with a digit), as an environment variable's name is too."""
    prefix, dotted = re.match(r"(\+\+|\+|~)?(.*)", key).groups()  # type: ignore[union-attr]
    parts = dotted.split(".")
    bad = next((p for p in parts if not p.isidentifier()), dotted)
    fixed = re.sub(r"\W", "_", bad)
    fixed = f"_{fixed}" if fixed[:1].isdigit() or not fixed else fixed
    example = (prefix or "") + ".".join(fixed if p == bad else p for p in parts)
    return (f"cannot read the override {override!r}: {bad!r} in its key is no name Hydra (or a "
            "shell, for an environment variable) accepts: each part of a key is letters, "
            "digits and `_`, not starting with a digit, and quoting cannot fix a key; "
            f"{shell_word(example + '=...')} would be read.")


def check_syntax(overrides: list[str]) -> None:
    """UsageError, one line with the override quoted for Hydra and the shell, for the first
    override Hydra's grammar cannot read."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except OverrideParseException:
            key, eq, value = override.partition("=")
            if not eq:
                raise UsageError(f"cannot read the override {override!r}: Hydra's overrides are "
                                 "key=value, +key=value or ~key.") from None
            if _bad_key(parser, key):  # quoting the value cannot help: say what can
                raise UsageError(_key_problem(override, key)) from None
            fixed = shell_word(f"{key}={hydra_value(value) if value else chr(39) * 2}")
            raise UsageError(
                f"cannot read the override {override!r}: Hydra needs quotes around a value with "
                f"spaces, quotes, unicode, braces or other special characters; write it as "
                f"{fixed}") from None
