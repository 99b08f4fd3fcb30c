"""The config groups a person picks from and their options, read from `conf/` as files: what
`dspark <command> --help` lists and what a mistyped option is matched against.

An option is a YAML file of a group's folder; its one-line description is its `# help:` line,
else the first sentence of its header comment. Bases (`conf/bases/`) and Hydra's own groups are
building blocks, never options to pick, and are not listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dspark_cli.paths import conf_dir

_HELP = re.compile(r"^#\s*help:\s*(.+?)\s*$")
_INTERNAL = ("bases", "hydra")
_SENTENCE_END = re.compile(r"\.(\s|$)")
_LONG = 72  # a first sentence longer than this is cut at its first colon


@dataclass(frozen=True)
class Option:
    name: str
    help: str


def describe(path: Path) -> str:
    """The option's one line: its `# help:` line, else its header's first sentence."""
    header: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        found = _HELP.match(line)
        if found:
            return found.group(1)
        text = line.lstrip("#")
        if line.startswith("# @package") or text.startswith("  "):  # a directive, an example
            if header:
                break
            continue
        header.append(text.strip())
    joined = " ".join(header)
    end = _SENTENCE_END.search(joined)
    first = joined[:end.start()] if end else joined
    return first.split(": ")[0] if len(first) > _LONG and ": " in first else first


def options(group: str) -> tuple[Option, ...]:
    """The options of a group (`hw`, `model`, ...), by name; none for an unknown group."""
    folder = conf_dir() / group
    return tuple(Option(p.stem, describe(p)) for p in sorted(folder.glob("*.yaml")))


def option_names(group: str) -> list[str]:
    return [o.name for o in options(group)]


def _defaults(config: str) -> list[str | dict[str, object]]:
    import yaml

    path = conf_dir() / f"{config}.yaml"
    if not path.is_file():
        return []  # a schema in Hydra's ConfigStore, not a file
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return list(data.get("defaults") or [])


def groups_of(config: str) -> list[str]:
    """The groups a primary config composes (its defaults list, and those of the configs it
    includes), in order, without bases and Hydra's groups."""
    found: list[str] = []
    for entry in _defaults(config):
        if isinstance(entry, str):
            names = groups_of(entry) if not entry.startswith(_INTERNAL) else []
        else:
            names = [str(k).removeprefix("override ").lstrip("/") for k in dict(entry)]
        found += [n for n in names if n not in found and not n.startswith(_INTERNAL)]
    return found


def all_groups() -> list[str]:
    """Every group under conf/ a person may pick an option of."""
    return sorted(p.name for p in conf_dir().iterdir()
                  if p.is_dir() and p.name not in _INTERNAL and any(p.glob("*.yaml")))
