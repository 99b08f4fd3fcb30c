"""Kubernetes objects as the YAML people apply: one document per object, `---` between them,
fields in the order they were built, scripts as literal blocks, no YAML anchors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: Sequence[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         width=100)
