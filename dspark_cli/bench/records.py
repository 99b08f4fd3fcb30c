"""Where a cell's record lives on disk, and how records are read back (resume, report merge).

Layout of a run directory: `cells/<arm>-c<concurrency>/cell.json` (`<arm>+pc-off` for prefix
caching off, `-r<repeat>` appended when the protocol repeats cells) next to that cell's server
log, load-generator logs and results. A retried cell's earlier attempt is moved aside to
`cells/<id>.attempt<N>/`, so nothing measured is ever overwritten.

`merge`: the cell records under a directory (one run, a resumed run, or a Hydra multirun sweep
whose jobs each ran some cells) merged into one summary.json, summary.csv and summary.png.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_cli.bench import proposal
from dspark_cli.bench.cell import FIELDS, REQUIRED, CellRecord
from dspark_cli.bench.proposal_files import Launch, write_proposal
from dspark_cli.bench.render import for_terminal, plot
from dspark_cli.bench.summary import Summary, summarize, write
from dspark_cli.errors import UsageError
from dspark_cli.paths import CELL_JSON, CELLS_DIR
from dspark_cli.untrusted import (
    RecordError,
    check,
    load_json,
    shown_path,
    text_path,
    walk,
    without_nulls,
)


def cell_dir(run_dir: Path, cell_id: str) -> Path:
    return run_dir / CELLS_DIR / cell_id


def read(path: Path, root: Path | None = None) -> CellRecord:
    """One cell record, read as untrusted input (`untrusted.py`): inside `root` (default: its
    own directory), every field of its JSON type, a null one read as its default; RecordError
    (exit 2) naming the file and field when it is not a dspark cell record."""
    data = load_json(path, root or path.parent)
    if data is None:
        raise RecordError(path, "the file", "does not exist")
    check(data, path, FIELDS, REQUIRED)
    data = without_nulls(data)
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


@dataclass(frozen=True)
class Merged:
    """The summary of every cell record under `directory`, and the files written from it."""

    directory: Path
    summary: Summary
    summary_json: Path
    summary_csv: Path
    plot_png: Path | None  # None: matplotlib (the `plot` extra) is not installed
    proposal_json: Path | None = None  # the configuration the winners propose


def _ordered_union(lists: Sequence[Sequence[Any]]) -> tuple[Any, ...]:
    out: list[Any] = []
    for items in lists:
        out.extend(x for x in items if x not in out)
    return tuple(out)


def summarize_records(records: Sequence[CellRecord]) -> Summary:
    """One summary for the records of one protocol (retries included: the best record of each
    cell counts); UsageError if they mix protocols, baselines or equivalence margins."""
    protocols = [r.protocol for r in records]
    names = {p.name for p in protocols}
    baselines = {p.baseline_variant for p in protocols}
    margins = {p.equivalence_margin for p in protocols}
    objectives = {p.objectives for p in protocols}
    if len(names) > 1 or len(baselines) > 1 or len(margins) > 1 or len(objectives) > 1:
        raise UsageError(
            f"The cell records mix protocols {sorted(names)} / baselines {sorted(baselines)} / "
            f"equivalence margins {sorted(margins)} / latency objectives "
            f"{[o.words() if o else None for o in objectives]}; a summary compares cells of "
            "one protocol only.",
            hint="Report each protocol's directory separately.",
        )
    _belong_together(records)
    return summarize(
        pick_best(records),
        protocol=names.pop(),
        arms=_ordered_union([p.variants for p in protocols]),
        baseline=baselines.pop(),
        concurrencies=_ordered_union([p.concurrencies for p in protocols]),
        repeats=max(p.repeats for p in protocols),
        equivalence_margin=margins.pop(),
        objectives=objectives.pop(),
        prefix_caching=_ordered_union([p.prefix_caching for p in protocols]),
    )


def _recorded(record: CellRecord, *path: str) -> Any:
    node: Any = record.evidence
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, str | int | float) and not isinstance(node, bool) else None


def _request_set(record: CellRecord) -> str | None:
    """The requests a cell measured: its dataset's content (sha256, else its file) and, for
    synthetic prompts, their kind, length and seed."""
    if not isinstance(record.evidence.get("dataset"), dict):
        return None
    kind, sha, file = (_recorded(record, "dataset", k) for k in ("kind", "sha256", "file"))
    shape = ", ".join(f"{k} {v}" for k in ("input_tokens", "seed")
                      if (v := _recorded(record, "dataset", k)) is not None)
    return f"{kind or 'dataset'} {sha or file or ''}".strip() + (f" ({shape})" if shape else "")


def _belong_together(records: Sequence[CellRecord]) -> None:
    """UsageError when the cells measured different models or request sets: one speedup over
    them would compare nothing."""
    models = {str(m) for r in records if (m := _recorded(r, "launch", "plan", "model_path"))}
    datasets = {d for r in records if (d := _request_set(r))}
    if len(models) > 1 or len(datasets) > 1:
        raise UsageError(
            f"The cell records do not belong together: models {sorted(models)} / request sets "
            f"{sorted(datasets)}; a summary compares cells of one model on one request set "
            "only.", hint="Report each run's directory separately.")


def merge(directory: Path, launch: Launch | None = None) -> Merged:
    """Collect, summarize, and write summary.json/csv/png and proposal.json into `directory`.
    It runs nothing and reads nothing back as config: only `launch` (the live bench's own
    config) puts the proposal through the preflight; `bench --report` passes none."""
    if not text_path(directory).is_dir():
        raise UsageError(f"{shown_path(directory)} is not a directory.")
    records = collect(directory)
    if not records:
        raise UsageError(
            f"No cell records ({CELL_JSON}) under {directory}.",
            hint="Point the report at a `dspark bench` run or multirun directory.",
        )
    summary = summarize_records(records)
    json_path, csv_path = write(summary, directory)
    png = None
    if importlib.util.find_spec("matplotlib"):
        shown = for_terminal(summary, markup=False)  # record text as a picture may show it
        png = plot(shown, directory)
        proposal.plot(shown, directory)
    return Merged(directory, summary, json_path, csv_path, png,
                  write_proposal(summary, directory, launch))
