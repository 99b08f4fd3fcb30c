"""Finding and reading the records a report is built from, in run directories that exist: a
`dspark validate` run, or separate `smoke` and `bench` runs. Read only: nothing is written,
nothing is measured again.

A smoke run is a directory holding `smoke.json` (with its `config.yaml`, `launch.sh` and
`provenance.json` beside it when it was managed); a bench run holds `cells/*/cell.json` (with
`summary.png` and each arm's record under `arms/`; its summary is recomputed from the cells).
Every record is untrusted input: read inside the directory it was found under only, each field
of its JSON type (the specs below), and records of different models refused together.

The fields of each record the report reads, and their JSON types: what `untrusted.check`
holds a record to before the report trusts it (a record failing it is exit 2, naming the file
and the field). Keys are dotted paths; `*` is every item of a list or value of an object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_cli.accuracy import records as accuracy_records
from dspark_cli.accuracy.records import AccuracyRecord
from dspark_cli.bench import records
from dspark_cli.bench.proposal_files import recompute
from dspark_cli.bench.records import summarize_records
from dspark_cli.errors import UsageError
from dspark_cli.paths import (
    ACCURACY_JSON,
    ARMS_DIR,
    CELL_JSON,
    CHECKPOINT_JSON,
    CONFIG_YAML,
    LAUNCH_SH,
    LINT_JSON,
    PROVENANCE_JSON,
    SMOKE_JSON,
    SOURCE_JSON,
    SUMMARY_PNG,
    TESTS_JSON,
    VALIDATE_JSON,
)
from dspark_cli.untrusted import (
    BOOL,
    COUNT,
    INT,
    LIST,
    MAP,
    MARGIN,
    NUMBER,
    TEXT,
    Spec,
    check,
    contained,
    load_record,
    load_yaml,
    read_text,
    shown_path,
    text_path,
    walk,
)

VALIDATE = {"stages": LIST, "stages.*": MAP, "stages.*.name": TEXT, "stages.*.status": TEXT,
            "stages.*.detail": TEXT, "exit_code": INT}
VALIDATE_REQUIRED = ("stages", "stages.*.name", "stages.*.status")

TESTS = {"status": TEXT, "node_ids": LIST, "node_ids.*": TEXT, "source": TEXT, "counts": MAP,
         "counts.*": COUNT, "detail": TEXT}
TESTS_REQUIRED = ("status",)

CHECKPOINT = {"num_shards": COUNT, "total_bytes": COUNT}

# The focused stage's source tree (validate/source.py) and its lint/format results.
SOURCE = {"path": TEXT, "git": BOOL, "error": TEXT, "branch": TEXT, "head": TEXT,
          "upstream": TEXT, "base": TEXT, "files": LIST, "files.*": MAP, "files.*.path": TEXT,
          "files.*.insertions": COUNT, "files.*.deletions": COUNT, "files.*.kind": TEXT,
          "insertions": COUNT, "deletions": COUNT, "uncommitted": COUNT}
SOURCE_REQUIRED = ("git", "files.*.path", "files.*.kind")
LINT = {"results": LIST, "results.*": MAP, "results.*.command": TEXT,
        "results.*.exit_code": INT, "results.*.summary": TEXT, "results.*.status": TEXT,
        "results.*.files": COUNT}
LINT_REQUIRED = ("results", "results.*.command", "results.*.status")

SMOKE = {"verdict": MAP, "verdict.passed": BOOL, "verdict.summary": TEXT, "mode": TEXT,
         "checks": LIST, "checks.*": MAP, "checks.*.name": TEXT, "checks.*.status": TEXT,
         "checks.*.evidence": TEXT, "checks.*.data": MAP, "checks.*.data.k": COUNT,
         "checks.*.data.rule": TEXT, "request": MAP, "request.completion_tokens": COUNT,
         "counters": MAP, "counters.spec_decode": MAP, "counters.spec_decode.drafts": COUNT,
         "counters.spec_decode.draft_tokens": COUNT, "counters.spec_decode.accepted": COUNT,
         "versions": MAP, "checks.*.data.families": LIST, "checks.*.data.families.*": TEXT,
         "checks.*.data.events": LIST, "checks.*.data.events.*": MAP,
         "checks.*.data.events.*.pattern": TEXT, "checks.*.data.events.*.line_no": COUNT,
         "checks.*.data.events.*.line": TEXT, "checks.*.data.evidence": MAP,
         "checks.*.data.evidence.*": MAP, "checks.*.data.evidence.*.expected": BOOL,
         "checks.*.data.evidence.*.line_no": COUNT, "checks.*.data.evidence.*.line": TEXT}
SMOKE_REQUIRED = ("verdict", "verdict.passed", "checks.*.name", "checks.*.status",
                  "counters.spec_decode.drafts", "counters.spec_decode.draft_tokens",
                  "counters.spec_decode.accepted")

_CHECKPOINT = {"path": TEXT, "exists": BOOL, "config_sha256": TEXT, "index_sha256": TEXT,
               "name": TEXT, "name_from": TEXT, "model_type": TEXT, "expert_dtype": TEXT,
               "architecture": TEXT, "quantization": MAP, "num_shards": COUNT,
               "total_bytes": COUNT}
PROVENANCE = {"hardware": MAP, "hardware.gpus": LIST, "hardware.gpus.*": MAP,
              "hardware.gpus.*.name": TEXT, "hardware.platform": TEXT, "platform": TEXT,
              "checkpoint": MAP, **{f"checkpoint.{k}": v for k, v in _CHECKPOINT.items()},
              "runtime": MAP, "runtime.vllm_commit": TEXT, "runtime.vllm_version": TEXT,
              "runtime.aiter_wheel_sha256": TEXT, "packages": MAP, "torch_backends": MAP,
              "argv": LIST, "argv.*": TEXT}
# An attached smoke's `versions` (the server's own and this host's provenance).
SMOKE.update({f"versions.{k}": v for k, v in PROVENANCE.items()})

CONFIG = {"model": MAP, "model.path": TEXT, "model.name": TEXT, "model.args": MAP,
          "model.args.served_model_name": TEXT, "hw": MAP, "hw.name": TEXT, "hw.args": MAP,
          "runtime": MAP, "runtime.image": MAP, "runtime.image.tag": TEXT,
          "runtime.image.id": TEXT, "runtime.image.base_digest": TEXT,
          "runtime.image.vllm_patch": TEXT, "runtime.image.published": TEXT,
          "runtime.expected": MAP, "runtime.expected.vllm_commit": TEXT, "logs": MAP,
          "logs.fatal": MAP, "logs.fatal.*": TEXT, "bench": MAP, "bench.name": TEXT,
          "bench.dataset": MAP, "bench.dataset.kind": TEXT, "bench.dataset.subset": TEXT,
          "bench.dataset.path": TEXT, "bench.dataset.sha256": TEXT,
          "bench.dataset.input_tokens": INT, "bench.dataset.seed": INT, "bench.sampling": MAP,
          "bench.sampling.temperature": NUMBER, "bench.sampling.top_p": NUMBER,
          "bench.sampling.max_output_tokens": INT, "bench.sampling.ignore_eos": BOOL,
          "bench.warmups": LIST, "bench.warmups.*": MAP, "bench.warmups.*.num_prompts": COUNT,
          "bench.warmups.*.concurrency": COUNT, "bench.warmups.*.output_tokens": COUNT,
          "bench.measured_prompts": COUNT, "bench.concurrencies": LIST,
          "bench.concurrencies.*": COUNT, "bench.arms": LIST, "bench.arms.*": TEXT,
          "bench.baseline": TEXT, "bench.repeats": COUNT, "bench.equivalence_margin": MARGIN}
CONFIG_REQUIRED = ("bench.warmups.*.num_prompts", "bench.warmups.*.output_tokens")


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
    # The proposal the recomputed winners make (never the run's proposal.json: a planted
    # one would be shown as found); its preflight is not checked here.
    proposal: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Sources:
    directories: tuple[Path, ...]
    validate: Mapping[str, Any] | None
    checkpoint: Mapping[str, Any] | None
    tests: Mapping[str, Any] | None
    smoke: SmokeRecords | None
    bench: BenchRecords | None
    revision: Mapping[str, Any] | None = None  # the focused stage's source.json
    lint: Mapping[str, Any] | None = None  # its lint.json
    accuracy: AccuracyRecord | None = None  # validate's accuracy stage
    accuracy_path: Path | None = None


def lookup(record: Mapping[str, Any] | None, *path: str) -> Any:
    """The value at `path` in a record read back; None where a step is missing or not a map
    (records from older versions lack newer keys)."""
    node: Any = record or {}
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def read_yaml(path: Path, root: Path) -> dict[str, Any]:
    """A run's config.yaml inside `root`, held to `CONFIG` ({} when absent)."""
    data = load_yaml(path, root)
    if data is None:
        return {}
    check(data, path, CONFIG, CONFIG_REQUIRED)
    return data


def _one(found: Sequence[Path], what: str) -> Path | None:
    """The only match; two records of one kind would make the report ambiguous."""
    unique = sorted(set(found))
    if len(unique) > 1:
        listed = ", ".join(str(p) for p in unique)
        raise UsageError(f"more than one {what} in the given directories ({listed}); a report "
                         "covers one run of each kind.", hint="pass the run directories one "
                         "report should cover")
    return unique[0] if unique else None


def _smoke(path: Path | None, root: Path) -> SmokeRecords | None:
    if path is None:
        return None
    d = path.parent
    return SmokeRecords(d, load_record(path, root, SMOKE, SMOKE_REQUIRED),
                        read_yaml(d / CONFIG_YAML, root), read_text(d / LAUNCH_SH, root),
                        load_record(d / PROVENANCE_JSON, root, PROVENANCE) or {})


def _bench(root: Path | None) -> BenchRecords | None:
    """The bench run at `root`: its summary recomputed from the cell records (retries
    included, as `bench --report` does: an edited summary.json never wins)."""
    if root is None:
        return None
    read = {p: records.read(p, root) for p in walk(root, [CELL_JSON])[CELL_JSON]}
    arms = sorted(p for p in (root / ARMS_DIR).glob("*") if p.is_dir() and not p.is_symlink())
    plot = root / SUMMARY_PNG
    if plot.is_file() or plot.is_symlink():
        contained(plot, root)
    summary = summarize_records(list(read.values()))
    return BenchRecords(
        root, summary.as_dict(),
        tuple(r.to_dict() for p, r in read.items() if ".attempt" not in p.parent.name),
        {a.name: read_yaml(a / CONFIG_YAML, root) for a in arms},
        {a.name: t for a in arms if (t := read_text(a / LAUNCH_SH, root)) is not None},
        {a.name: prov for a in arms
         if (prov := load_record(a / PROVENANCE_JSON, root, PROVENANCE)) is not None},
        plot if plot.is_file() else None, recompute(summary, root, None).to_dict())


def _bench_root(cell: Path, given: Path) -> Path:
    """A cell record lives at <run>/cells/<id>/cell.json (a multirun: <sweep>/<job>/cells/...);
    never above the directory it was found under."""
    root = cell.parent.parent.parent
    return root if root.is_relative_to(given) else given


def _model(config: Mapping[str, Any]) -> str | None:
    path = lookup(config, "model", "path")
    return path if isinstance(path, str) else None


def _belong_together(smoke: SmokeRecords | None, bench: BenchRecords | None) -> None:
    """UsageError when the smoke and the bench ran different models: one report would claim
    both of one deployment. Each side's models are its own launch records': the smoke's
    config, each cell's launch (what was measured, whether or not `arms/` is there) and each
    arm's config."""
    cells, arms = (bench.cells, bench.arm_configs.values()) if bench else ((), ())
    models = {m for m in ([_model(smoke.config)] if smoke else []) +
              [lookup(c, "launch", "plan", "model_path") for c in cells] +
              [_model(c) for c in arms] if isinstance(m, str) and m}
    if len(models) > 1:
        raise UsageError(f"the given records do not belong together: different "
                         f"models ({', '.join(sorted(models))}); a report covers one "
                         "deployment.", hint="pass the run directories of one deployment")


def collect(directories: Sequence[Path]) -> Sources:
    """Every record under the directories, read as untrusted input (`untrusted.py`): nothing
    outside them is read or followed; UsageError when one is missing or holds none."""
    dirs = tuple(text_path(d).resolve() for d in directories)
    for d in dirs:
        if not d.is_dir():
            raise UsageError(f"{shown_path(d)} is not a directory; give run directories of `dspark "
                             "validate`, `dspark smoke` or `dspark bench`.")
    found: dict[str, list[Path]] = {n: [] for n in (VALIDATE_JSON, CHECKPOINT_JSON, TESTS_JSON,
                                                    SMOKE_JSON, CELL_JSON, SOURCE_JSON,
                                                    LINT_JSON, ACCURACY_JSON)}
    under: dict[Path, Path] = {}  # each record -> the given directory it was found under
    for d in dirs:
        for name, paths in walk(d, found).items():
            for p in map(text_path, paths):
                if ".attempt" not in p.parent.name:
                    found[name].append(p)
                    under.setdefault(p, d)
    roots = {_bench_root(c, under[c]): under[c] for c in found[CELL_JSON]}
    # A multirun's jobs share one sweep directory: its jobs' cells are one protocol.
    if len(roots) > 1:
        roots = {r.parent if r.parent.is_relative_to(d) else r: d for r, d in roots.items()}
    bench_root = _one(sorted(roots), "bench run")

    def one(name: str, what: str, spec: Spec, required: Sequence[str] = ()) -> Any:
        path = _one(found[name], what)
        return None if path is None else load_record(path, under[path], spec, required)

    smoke_json = _one(found[SMOKE_JSON], "smoke run")
    accuracy = _one(found[ACCURACY_JSON], "accuracy record")
    sources = Sources(
        dirs,
        one(VALIDATE_JSON, "validate run", VALIDATE, VALIDATE_REQUIRED),
        one(CHECKPOINT_JSON, "checkpoint record", CHECKPOINT),
        one(TESTS_JSON, "focused-test record", TESTS, TESTS_REQUIRED),
        _smoke(smoke_json, under[smoke_json]) if smoke_json else None,
        _bench(bench_root),
        one(SOURCE_JSON, "source revision record", SOURCE, SOURCE_REQUIRED),
        one(LINT_JSON, "lint record", LINT, LINT_REQUIRED),
        accuracy=accuracy_records.read(accuracy, under[accuracy]) if accuracy else None,
        accuracy_path=accuracy,
    )
    if not any((sources.validate, sources.checkpoint, sources.tests, sources.smoke,
                sources.bench, sources.accuracy)):
        raise UsageError(f"no dspark run records under {', '.join(map(str, dirs))} (looked "
                         "for validate.json, smoke.json and cells/*/cell.json).")
    _belong_together(sources.smoke, sources.bench)
    return sources
