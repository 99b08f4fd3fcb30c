"""Finding and reading the records a report is built from, in run directories that exist: a
`dspark validate` run, or separate `smoke` and `bench` runs. Read only: nothing is written,
nothing is measured again.

A smoke run is a directory holding `smoke.json` (with its `config.yaml`, `launch.sh` and
`provenance.json` beside it when it was managed); a bench run holds `cells/*/cell.json` (with
`summary.json`, `summary.png` and each arm's record under `arms/`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dspark_cli.errors import UsageError
from dspark_cli.run_files import (
    ARMS_DIR,
    CELL_JSON,
    CHECKPOINT_JSON,
    CONFIG_YAML,
    LAUNCH_SH,
    PROVENANCE_JSON,
    SMOKE_JSON,
    SUMMARY_JSON,
    SUMMARY_PNG,
    TESTS_JSON,
    VALIDATE_JSON,
)


@dataclass(frozen=True)
class SmokeRecords:
    directory: Path
    smoke: Mapping[str, Any]
    config: Mapping[str, Any]  # config.yaml of the run ({} when attached)
    launch: str | None  # launch.sh
    provenance: Mapping[str, Any]


@dataclass(frozen=True)
class BenchRecords:
    directory: Path
    summary: Mapping[str, Any] | None
    cells: tuple[Mapping[str, Any], ...]
    arm_configs: Mapping[str, Mapping[str, Any]]  # arms/<arm>/config.yaml
    arm_launches: Mapping[str, str]  # arms/<arm>/launch.sh
    arm_provenance: Mapping[str, Mapping[str, Any]]
    plot: Path | None


@dataclass(frozen=True)
class Sources:
    directories: tuple[Path, ...]
    validate: Mapping[str, Any] | None
    checkpoint: Mapping[str, Any] | None
    tests: Mapping[str, Any] | None
    smoke: SmokeRecords | None
    bench: BenchRecords | None


def lookup(record: Mapping[str, Any] | None, *path: str) -> Any:
    """The value at `path` in a record read back; None where a step is missing or not a map
    (records from older versions lack newer keys)."""
    node: Any = record or {}
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read record {path}: {e}.") from None


def read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        # libyaml's loader where installed: a resolved config.yaml is hundreds of lines.
        data = yaml.load(path.read_text(encoding="utf-8"),
                         Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as e:
        raise UsageError(f"cannot read record {path}: {e}.") from None
    return data if isinstance(data, dict) else {}


def _text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _one(found: Sequence[Path], what: str) -> Path | None:
    """The only match; two records of one kind would make the report ambiguous."""
    unique = sorted(set(found))
    if len(unique) > 1:
        listed = ", ".join(str(p) for p in unique)
        raise UsageError(f"more than one {what} in the given directories ({listed}); a report "
                         "covers one run of each kind.", hint="pass the run directories one "
                         "report should cover")
    return unique[0] if unique else None


def _smoke(path: Path | None) -> SmokeRecords | None:
    if path is None:
        return None
    d = path.parent
    prov = d / PROVENANCE_JSON
    return SmokeRecords(d, read_json(path), read_yaml(d / CONFIG_YAML), _text(d / LAUNCH_SH),
                        read_json(prov) if prov.is_file() else {})


def _bench(root: Path | None, cells: Sequence[Path]) -> BenchRecords | None:
    if root is None:
        return None
    arms = sorted(p for p in (root / ARMS_DIR).glob("*") if p.is_dir())
    summary = root / SUMMARY_JSON
    plot = root / SUMMARY_PNG
    return BenchRecords(
        root, read_json(summary) if summary.is_file() else None,
        tuple(read_json(p) for p in sorted(cells)),
        {a.name: read_yaml(a / CONFIG_YAML) for a in arms},
        {a.name: t for a in arms if (t := _text(a / LAUNCH_SH)) is not None},
        {a.name: read_json(a / PROVENANCE_JSON) for a in arms
         if (a / PROVENANCE_JSON).is_file()},
        plot if plot.is_file() else None)


def _bench_root(cell: Path) -> Path:
    """A cell record lives at <run>/cells/<id>/cell.json (a multirun: <sweep>/<job>/cells/...)."""
    return cell.parent.parent.parent


def collect(directories: Sequence[Path]) -> Sources:
    """Every record under the directories; UsageError when one is missing or holds none."""
    dirs = tuple(d.resolve() for d in directories)
    for d in dirs:
        if not d.is_dir():
            raise UsageError(f"{d} is not a directory; give run directories of `dspark "
                             "validate`, `dspark smoke` or `dspark bench`.")
    found: dict[str, list[Path]] = {n: [] for n in (VALIDATE_JSON, CHECKPOINT_JSON, TESTS_JSON,
                                                    SMOKE_JSON, CELL_JSON)}
    for d in dirs:
        for name, paths in found.items():
            paths.extend(p for p in d.rglob(name) if ".attempt" not in p.parent.name)
    cells = found[CELL_JSON]
    roots = {_bench_root(c) for c in cells}
    # A multirun's jobs share one sweep directory: its jobs' cells are one protocol.
    bench_root = _one(sorted({r.parent if len(roots) > 1 else r for r in roots}), "bench run")
    sources = Sources(
        dirs,
        _json_or_none(_one(found[VALIDATE_JSON], "validate run")),
        _json_or_none(_one(found[CHECKPOINT_JSON], "checkpoint record")),
        _json_or_none(_one(found[TESTS_JSON], "focused-test record")),
        _smoke(_one(found[SMOKE_JSON], "smoke run")),
        _bench(bench_root, cells),
    )
    if not any((sources.validate, sources.checkpoint, sources.tests, sources.smoke,
                sources.bench)):
        raise UsageError(f"no dspark run records under {', '.join(map(str, dirs))} (looked "
                         "for validate.json, smoke.json and cells/*/cell.json).")
    return sources


def _json_or_none(path: Path | None) -> Any:
    return None if path is None else read_json(path)
