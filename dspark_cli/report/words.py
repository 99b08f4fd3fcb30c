"""The words a report section uses where a record holds nothing, in one place (every section
module says "unknown" and "not run" the same way)."""

from __future__ import annotations

from typing import Any

UNKNOWN = "unknown"
NOT_RUN = "not run"


def known(value: Any) -> str:
    """A recorded fact as text; "unknown" where the record has none."""
    return UNKNOWN if value is None or value == "" else str(value)
