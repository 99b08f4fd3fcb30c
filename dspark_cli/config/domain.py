"""The allowed values of a schema field, declared beside the field (`metadata=between(1, 65535)`)
and checked for every composed config before anything runs (`config.strict.check_ranges`)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any


@dataclass(frozen=True)
class Domain:
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # (low, high]: the low end itself is not allowed
    nonempty: bool = False  # a string that is set must hold more than blanks
    regex: bool = False  # a Python regular expression
    hex_digits: tuple[int, int] | None = None  # a hex string of (least, most) digits
    # A check of its own (why a value is refused, or None) and what it allows, in words.
    check: Callable[[Any], str | None] | None = None
    allows: str = ""

    def describe(self) -> str:
        if self.check is not None:
            return self.allows
        if self.hex_digits:
            least, most = self.hex_digits
            return f"{least} to {most} hex digits" if least != most else f"{least} hex digits"
        if self.regex:
            return "a valid regular expression"
        if self.nonempty:
            return "a non-empty string"
        low = "" if self.low is None else f"{'>' if self.low_open else '>='} {self.low:g}"
        high = "" if self.high is None else f"<= {self.high:g}"
        return " and ".join(p for p in (low, high) if p)

    def problem(self, value: Any) -> str | None:
        """Why `value` is outside the domain, or None; None (unset) is always allowed."""
        if value is None:
            return None
        if self.check is not None:
            return self.check(value)
        if self.hex_digits:
            least, most = self.hex_digits
            text = str(value)
            return None if least <= len(text) <= most and all(
                c in "0123456789abcdefABCDEF" for c in text) else "is not a hex hash of that length"
        if self.regex:
            try:
                re.compile(str(value))
            except (re.error, RecursionError, OverflowError) as e:
                return f"is not a regular expression ({e})"
            return None
        if self.nonempty:
            return None if str(value).strip() else "is empty"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None  # the schema's type check owns this
        if not math.isfinite(value):
            return "is not a finite number"
        too_low = self.low is not None and (value <= self.low if self.low_open
                                            else value < self.low)
        too_high = self.high is not None and value > self.high
        return "is out of range" if too_low or too_high else None


def between(low: float | None = None, high: float | None = None, *,
            low_open: bool = False) -> dict[str, Domain]:
    """Field metadata: a number in [low, high] ((low, high] with `low_open`)."""
    return {"domain": Domain(low, high, low_open)}


def nonempty() -> dict[str, Domain]:
    return {"domain": Domain(nonempty=True)}


def regexes() -> dict[str, Domain]:
    """Field metadata: a regular expression (or a list of them)."""
    return {"domain": Domain(regex=True)}


def checked(check: Callable[[Any], str | None], allows: str) -> dict[str, Domain]:
    """Field metadata: a value (or each item of a list) that `check` finds no problem with."""
    return {"domain": Domain(check=check, allows=allows)}


def hex_digits(least: int, most: int | None = None) -> dict[str, Domain]:
    """Field metadata: a hex hash (a commit, a SHA-256); a commit of 7 digits or more, so an
    empty or one-character pin never matches every commit by prefix."""
    return {"domain": Domain(hex_digits=(least, most or least))}


COMMIT = hex_digits(7, 40)
SHA256 = hex_digits(64)
PORT = between(1, 65535)
POSITIVE = between(1)


# A schema class is a type for OmegaConf, never compared or printed as an object: without the
# generated __repr__ and __eq__ (each one an exec at import) every command starts sooner.
# (A class without a docstring costs an inspect.signature too: every schema class has one.)
if TYPE_CHECKING:  # the checker cannot see that the call below makes a dataclass decorator
    from typing import TypeVar, dataclass_transform

    _T = TypeVar("_T")

    @dataclass_transform()
    def schema_class(cls: type[_T]) -> type[_T]: ...
else:
    schema_class = dataclass(repr=False, eq=False)
