"""Config nodes as plain Python values, the form every pure planner takes."""

from __future__ import annotations

from enum import Enum
from typing import Any

from omegaconf import OmegaConf


def plain(node: Any) -> Any:
    """A config node as dicts, lists and scalars (interpolations resolved, enums as strings);
    an enum as its value; anything else unchanged."""
    if isinstance(node, Enum):
        return node.value
    if OmegaConf.is_config(node):
        return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
    return node
