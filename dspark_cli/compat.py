"""What Python 3.11 added and dspark uses, for Python 3.10: vLLM's range (3.10-3.13) is dspark's,
since dspark installs into the Python that holds the platform's vLLM."""

from __future__ import annotations

import enum
import sys

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, enum.Enum):
        """enum.StrEnum as 3.11 has it: members are strings, and str() and format() give the
        value (a plain str mixin gives 'Class.member' there)."""

        __str__ = str.__str__
        __format__ = str.__format__


__all__ = ["StrEnum"]
