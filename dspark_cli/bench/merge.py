"""Merge the cell records under a directory (one run, a resumed run, or a Hydra multirun sweep
whose jobs each ran some cells) into one summary.json, summary.csv and summary.png.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_cli.bench import decision_plot
from dspark_cli.bench import records as rec
from dspark_cli.bench.cell import CellRecord
from dspark_cli.bench.proposal_files import Launch, write_proposal
from dspark_cli.bench.summary import Summary, summarize, write
from dspark_cli.errors import UsageError
from dspark_cli.untrusted import shown_path, text_path


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
        rec.pick_best(records),
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
    records = rec.collect(directory)
    if not records:
        raise UsageError(
            f"No cell records ({rec.CELL_JSON}) under {directory}.",
            hint="Point the report at a `dspark bench` run or multirun directory.",
        )
    from dspark_cli.bench.plot import plot

    summary = summarize_records(records)
    json_path, csv_path = write(summary, directory)
    png = None
    if importlib.util.find_spec("matplotlib"):
        from dspark_cli.bench.render import for_terminal

        shown = for_terminal(summary, markup=False)  # record text as a picture may show it
        png = plot(shown, directory)
        decision_plot.plot(shown, directory)
    return Merged(directory, summary, json_path, csv_path, png,
                  write_proposal(summary, directory, launch))
