"""Every field of every section of a cell record is typed by the one reader (untrusted.py): a
real bench run's records (evidence/h200-vllm-0.26/bench, written by dspark on an H200), one
cell given the sections newer runs write (from the functions that write them), then each of
its fields replaced in turn by null, a string, a list and NaN; the same for the smoke's records
of that H200. `bench --report` and `report`
read a null as the field's default, or refuse the record (exit 2) naming the field; never an
internal error (exit 70)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dspark_cli.bench import records
from dspark_cli.bench.cell import FIELDS, acceptance_flag
from dspark_cli.bench.proposal_files import recompute
from dspark_cli.bench.render import for_terminal, table
from dspark_cli.console import output
from dspark_cli.errors import UsageError
from dspark_cli.machine import gpu_sampler
from dspark_cli.report.markdown import write_report
from dspark_cli.server.logscan import read_cold_start
from dspark_cli.untrusted import SCALARS
from tests.conftest import REPO, run_dspark

RUN = REPO / "evidence" / "h200-vllm-0.26" / "bench"
CELL = Path("cells") / "dspark_draft-c16" / "cell.json"
# Sections whose keys are names (a metric, a variable, a GPU, a marker), not fields.
NAMED = ("latency_ms", "latency_ms.*", "metrics_delta.request_success", "launch.plan.env",
         "cold_start.phases_s", "cold_start.markers", "gpus.whole_run.*.means",
         "gpus.measured.*.means", "timings", "loadgen")


def newer_sections(cell: dict[str, Any], log: Path) -> dict[str, Any]:
    """The sections a bench of today writes that the evidence run predates, each from the
    function that writes it (bench/runner.py's record)."""
    samples = [gpu_sampler.Sample(t, "0", (90.0, 1000.0, 300.0, 1800.0, 60.0, 0.0))
               for t in (0.0, 1.0, 2.0)]
    cold = read_cold_start(log)
    assert cold is not None
    cold.update(boot_s=cell["boot_s"], before_first_line_s=1.5)
    return {
        "prefix_caching": True, "adaptive_asked": False, "fallbacks": [],
        "acceptance_check": acceptance_flag(cell["spec_decode"], 0.0),
        "gpus": {**gpu_sampler.record("nvidia-smi", 1.0, samples, (0.5, 2.5), 10.0),
                 "file": "gpus.json"},
        "cold_start": cold,
        "request_set": {"name": "random (64 input tokens, seed 0)", "kind": "random",
                        "sha256": None, "rows": None, "chat_templated": False,
                        "random_tokens": True, "sentence": "random token ids"},
        "stall": {"reason": "stalled", "sentence": "stalled: no token generated for 30 s",
                  "engine": "all", "seconds_without_token": 30.0, "stall_s": 30.0,
                  "running": 4.0, "waiting": 0.0, "generation_tokens": 100.0,
                  "tripped_at": "2026-12-04T16:25:00Z", "engines": {}},
        "draft_params": {"params": 97, "expected": 97, "line": 12, "ok": True,
                         "sentence": "DSpark draft loaded 97 params (pinned 97)"},
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("records") / "bench"
    shutil.copytree(RUN, root)
    cell = json.loads((root / CELL).read_text())
    cell.update(newer_sections(cell, root / CELL.parent / "server.log"))
    (root / CELL).write_text(json.dumps(cell))
    return root, cell


def generic(dotted: str) -> str:
    """A field's path as a spec names it: list items and named keys as `*`."""
    out: list[str] = []
    for part in dotted.split("."):
        out.append("*" if part.isdigit() or ".".join(out) in NAMED else part)
    return ".".join(out)


def places(node: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every field and section of a record (a list's first item stands for the rest)."""
    if path:
        yield path
    items = (node.items() if isinstance(node, dict) else
             list(enumerate(node))[:1] if isinstance(node, list) else ())
    for key, value in items:
        yield from places(value, (*path, key))


def dotted(path: tuple[str | int, ...]) -> str:
    return ".".join(map(str, path))


def test_every_field_a_cell_holds_is_typed(base: tuple[Path, dict[str, Any]]) -> None:
    """The spec the reader holds cell.json to names every field the record holds (a field
    added to the record without a type fails here)."""
    _, cell = base
    fields = {generic(dotted(p)) for p in places(cell)}
    kept_as_printed = [f for f, kind in FIELDS.items() if kind == SCALARS]  # and their items
    untyped = sorted(f for f in fields - set(FIELDS)
                     if not any(f.startswith(k + ".") for k in kept_as_printed))
    assert untyped == []


def read_back(root: Path, out: Path) -> None:
    """What `bench --report` and `report` do with the records (in this process: the walk is
    hundreds of records): the cells read and summarized, the terminal's tables, the proposal,
    and report.md."""
    summary = records.summarize_records(records.collect(root))
    output().print(table(for_terminal(summary)))
    recompute(summary, root, None)
    write_report([root], out)


def replaced(cell: dict[str, Any], path: tuple[str | int, ...], value: Any) -> str:
    data = json.loads(json.dumps(cell))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(data).replace('"<NaN>"', "NaN")


def test_each_field_null_a_string_a_list_or_nan_is_its_default_or_exit_2_naming_it(
        base: tuple[Path, dict[str, Any]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    root, cell = base
    work = tmp_path / "bench"
    shutil.copytree(root, work)
    crashed = []
    for path in places(cell):
        for value in (None, "a string", ["a", "list"], "<NaN>"):
            (work / CELL).write_text(replaced(cell, path, value))
            try:
                read_back(work, tmp_path / "out")
            except UsageError as e:  # exit 2: it names the field, or the file for NaN
                named = (f"{path[-1]}" in e.message if value != "<NaN>" else
                         str(work / CELL) in e.message and "NaN" in e.message)
                # Another model, request set or protocol: the records are refused together.
                belongs = any(w in e.message for w in ("do not belong together", "mix protocols"))
                if not (named or belongs):
                    crashed.append((dotted(path), value, e.message[:200]))
            except Exception as e:  # exit 70: what this test is for
                crashed.append((dotted(path), value, f"{type(e).__name__}: {e}"[:200]))
            capsys.readouterr()
    assert crashed == []


@pytest.mark.parametrize("name", ["smoke.json", "provenance.json"])
def test_each_smoke_record_field_is_its_default_or_exit_2_naming_it(
        tmp_path: Path, name: str) -> None:
    """The same walk over a real smoke's records (evidence/h200-vllm-0.26/smoke-warm) reported
    with the bench run: null read as the default, anything else refused naming the field."""
    smoke = tmp_path / "smoke"
    shutil.copytree(RUN.parent / "smoke-warm", smoke)
    record = json.loads((smoke / name).read_text())
    crashed = []
    for path in places(record):
        for value in (None, "a string", ["a", "list"], "<NaN>"):
            (smoke / name).write_text(replaced(record, path, value))
            try:
                write_report([smoke, RUN], tmp_path / "out")
            except UsageError as e:
                named = (f"{path[-1]}" in e.message if value != "<NaN>" else
                         str(smoke / name) in e.message and "NaN" in e.message)
                if not (named or "do not belong together" in e.message):
                    crashed.append((dotted(path), value, e.message[:200]))
            except Exception as e:
                crashed.append((dotted(path), value, f"{type(e).__name__}: {e}"[:200]))
    assert crashed == []


@pytest.mark.parametrize("command", ["bench", "report"])
def test_a_null_min_identical_is_the_default_and_a_string_is_exit_2(
        base: tuple[Path, dict[str, Any]], tmp_path: Path, command: str) -> None:
    """The case that ended both commands in exit 70: `lossless.min_identical` null is read as
    the protocol's default (every sequence identical); a string is refused, named."""
    root, cell = base
    work = tmp_path / "bench"
    shutil.copytree(root, work)

    def run() -> Any:
        if command == "bench":
            return run_dspark("bench", "--report", str(work), cwd=tmp_path, timeout=300)
        return run_dspark("report", str(work), "--out", str(tmp_path / "out"), cwd=tmp_path,
                          timeout=300)

    (work / CELL).write_text(replaced(cell, ("lossless", "min_identical"), None))
    done = run()
    assert done.returncode == 0, done.stderr[-2000:]
    (work / CELL).write_text(replaced(cell, ("lossless", "min_identical"), "all"))
    done = run()
    assert done.returncode == 2, done.stderr[-2000:]
    assert "lossless.min_identical must be a number from 0 to 1" in done.stderr
    assert str(work / CELL) in done.stderr and "Traceback" not in done.stderr
