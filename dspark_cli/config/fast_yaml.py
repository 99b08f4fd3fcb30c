"""OmegaConf's YAML loader on libyaml's C parser, for the duration of one composition.

OmegaConf builds a pure-Python `yaml.SafeLoader` subclass for every file it loads; a first
composition reads about twenty files, and parsing is a tenth of a dry run's time. This loader
keeps OmegaConf's rules (its float resolver, no timestamps, duplicate keys refused, pathlib
tags) and only swaps the parser. Without libyaml it changes nothing.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import yaml
from omegaconf import _utils

_OMEGACONF_LOADER = _utils.get_yaml_loader


@functools.cache
def _libyaml_loader() -> Any:
    rules = _OMEGACONF_LOADER()  # OmegaConf's own loader: its resolvers and constructors

    class Loader(yaml.CSafeLoader):  # type: ignore[misc, name-defined]
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
            keys = set()
            for key_node, _ in node.value:
                if key_node.tag != yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                    continue
                if key_node.value in keys:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key_node.value}", key_node.start_mark)
                keys.add(key_node.value)
            return yaml.constructor.SafeConstructor.construct_mapping(self, node, deep=deep)

    Loader.yaml_implicit_resolvers = dict(rules.yaml_implicit_resolvers)
    Loader.yaml_constructors = dict(rules.yaml_constructors)
    return Loader


@contextlib.contextmanager
def libyaml() -> Iterator[None]:
    """OmegaConf loads YAML with libyaml inside the block (when PyYAML has it)."""
    if not getattr(yaml, "__with_libyaml__", False):
        yield
        return
    _utils.get_yaml_loader = _libyaml_loader
    try:
        yield
    finally:
        _utils.get_yaml_loader = _OMEGACONF_LOADER
