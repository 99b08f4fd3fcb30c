"""Markdown for record strings, which are untrusted: inline text that renders as written,
code spans and fenced blocks no value can close, and tables whose cells cannot break out of
their row. Every section renderer writes record strings through these.

The words a section uses where a record holds nothing are here too, so every section says
"unknown" and "not run" the same way."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from dspark_cli.untrusted import printable

UNKNOWN = "unknown"
NOT_RUN = "not run"


def known(value: Any) -> str:
    """A recorded fact as text; "unknown" where the record has none."""
    return UNKNOWN if value is None or value == "" else str(value)


# Record strings are untrusted: inline, every character that could open markup (emphasis,
# a link or image, inline HTML or a comment, code, an entity) is escaped and line breaks are
# folded, so no value starts a heading, a list or a fence; in code, the fence outgrows every
# backtick run inside. `_` only where it could open emphasis (not inside a word).
_INLINE = re.compile(r"[\\`*\[\]<>&~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_LINE_BREAK = re.compile(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]")


def text(value: object) -> str:
    """A record's string as inline Markdown text: it renders as written, nothing more."""
    return _INLINE.sub(lambda m: _ENTITIES.get(m[0], "\\" + m[0]), one_line(value))


def _fence_for(body: str, least: int = 1) -> str:
    return "`" * max(least, 1 + max((len(r) for r in re.findall(r"`+", body)), default=0))


def code(value: object) -> str:
    """A record's string as an inline code span, on one line."""
    body = one_line(value)
    fence = _fence_for(body)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def block(lines: Sequence[str], info: str = "") -> list[str]:
    """Lines as a fenced code block whose fence no line can close."""
    lines = [printable(line, newlines=True) for line in lines]
    fence = _fence_for("\n".join(lines), 3)
    return [fence + info, *lines, fence]


def cell(value: object) -> str:
    """A table cell (record strings in it already `text()`): pipes escaped, lines folded."""
    return one_line(value).replace("|", "\\|")


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines


def one_line(value: object) -> str:
    """A record's string on one line, its control characters escaped (`printable`)."""
    return printable(_LINE_BREAK.sub(" ", str(value)))
