"""Where a cell's record lives on disk, and how records are read back (resume, report merge).

Layout of a run directory: `cells/<arm>-c<concurrency>/cell.json` (`<arm>+pc-off` for prefix
caching off, `-r<repeat>` appended when the protocol repeats cells) next to that cell's server
log, load-generator logs and results. A retried cell's earlier attempt is moved aside to
`cells/<id>.attempt<N>/`, so nothing measured is ever overwritten.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dspark_cli.bench.cell import FIELDS, REQUIRED, CellRecord
from dspark_cli.run_files import CELL_JSON, CELLS_DIR
from dspark_cli.untrusted import RecordError, check, load_json, walk


def cell_dir(run_dir: Path, cell_id: str) -> Path:
    return run_dir / CELLS_DIR / cell_id


def read(path: Path, root: Path | None = None) -> CellRecord:
    """One cell record, read as untrusted input (`untrusted.py`): inside `root` (default: its
    own directory), every field it uses of its JSON type; RecordError (exit 2) naming the file
    and field when it is not a dspark cell record."""
    data = load_json(path, root or path.parent)
    if data is None:
        raise RecordError(path, "the file", "does not exist")
    check(data, path, FIELDS, REQUIRED)
    if data["valid"] and data.get("output_throughput") is None:
        raise RecordError(path, "output_throughput", "is missing from a cell marked valid "
                          "(a valid cell measured its throughput)")
    try:
        return CellRecord.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RecordError(path, "a field", f"is not what a cell record holds "
                          f"({type(exc).__name__}: {exc})") from None


def finished_valid(run_dir: Path, cell_id: str) -> CellRecord | None:
    """The cell's record if a previous run finished it validly (resume skips it)."""
    path = cell_dir(run_dir, cell_id) / CELL_JSON
    if not path.exists() and not path.is_symlink():
        return None
    record = read(path, run_dir)
    return record if record.valid else None


def set_aside(run_dir: Path, cell_id: str) -> Path | None:
    """Move an unfinished or invalid attempt out of the way; returns where it went."""
    current = cell_dir(run_dir, cell_id)
    if not current.exists():
        return None
    n = 1
    while (target := current.with_name(f"{cell_id}.attempt{n}")).exists():
        n += 1
    current.rename(target)
    return target


def collect(root: Path) -> list[CellRecord]:
    """Every cell record under `root` (a run or a multirun directory), retries included."""
    return [read(p, root) for p in walk(root, [CELL_JSON])[CELL_JSON]]


def pick_best(records: Iterable[CellRecord]) -> list[CellRecord]:
    """One record per cell (arm and prefix caching, concurrency, repeat): where a cell was
    recorded more than once (a retry, two jobs), a valid record beats an invalid one and a later
    one an earlier one."""
    best: dict[tuple[str, int, int], CellRecord] = {}
    for r in records:
        key = (r.variant, r.concurrency, r.repeat)
        old = best.get(key)
        if old is None or (r.valid, r.finished_at) > (old.valid, old.finished_at):
            best[key] = r
    return list(best.values())
