"""`dspark bench`'s work, from a composed config to the summarized run directory: the ports this
job claims, every arm planned once on them, the cells run. Also `dspark validate`'s bench stage."""

from __future__ import annotations

import contextlib
import copy
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from dspark_cli.bench.arms import Arm, compose_arms
from dspark_cli.bench.dataset import DatasetSpec, checked_inputs, dataset_spec
from dspark_cli.bench.proposal_files import this_launch
from dspark_cli.bench.protocol import Protocol, build_protocol
from dspark_cli.bench.records import Merged, merge
from dspark_cli.bench.render import for_terminal, table
from dspark_cli.bench.runner import ArmLaunch, CellContext, arm_launch, run_cells
from dspark_cli.console import output, print_json, progress
from dspark_cli.deploy.start import ask_vllm_together, deploy_target
from dspark_cli.errors import DsparkError, ExitCode
from dspark_cli.launch.plan import client_host
from dspark_cli.machine.gpu_sampler import TOOLS, find_tool
from dspark_cli.paths import ARMS_DIR
from dspark_cli.server.liveness import settings_of
from dspark_cli.server.logscan import degraded_patterns, fallback_patterns, fatal_patterns
from dspark_cli.server.process import claimed_port, stop_signals_as_interrupt
from dspark_cli.untrusted import printable
from dspark_cli.vllm.accepts import Verdicts

if TYPE_CHECKING:  # the runner's machinery (the live server session) is imported when cells run
    from dspark_cli.bench.runner import CellHook
    from dspark_cli.config.bench import BenchPrimary


def protocol_of(cfg: BenchPrimary) -> tuple[Protocol, DatasetSpec]:
    """The protocol and request set `cfg.bench` describes (pure; the dataset is verified when
    the run starts)."""
    return build_protocol(cfg.bench), dataset_spec(cfg.bench.dataset, Path.cwd())


Primary = TypeVar("Primary", bound="BenchPrimary")  # a bench's config or validate's


@contextlib.contextmanager
def claimed_ports(cfg: Primary) -> Iterator[Primary]:
    """`cfg` with the ports this job holds while it runs, claimed before anything is planned.
    A sweep's jobs may run side by side on one host (submitit_local, Slurm jobs sharing a node):
    each claims its own port, from `server.port` up; several local nodes claim a block of API
    ports (one per node) and their own DP RPC and master ports. A single run keeps the ports as
    given (a busy port is refused as before). The caller's `cfg` is left as it is."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if (cfg.server.url is not None or not HydraConfig.initialized()
            or HydraConfig.get().mode != RunMode.MULTIRUN):
        yield cfg
        return
    host = client_host(cfg.server.host)
    assert cfg.hw is not None  # composed by every command that launches (null: verify-checkpoint's)
    nodes = int(cfg.hw.nodes) if deploy_target(cfg).here else 1
    claimed = copy.deepcopy(cfg)
    with contextlib.ExitStack() as claims:
        claimed.server.port = claims.enter_context(claimed_port(host, int(cfg.server.port),
                                                                width=nodes))
        if nodes > 1:
            for key in ("dp_rpc_port", "master_port"):
                setattr(claimed.hw, key, claims.enter_context(
                    claimed_port(host, int(getattr(cfg.hw, key)))))
        yield claimed


def run_protocol(cfg: BenchPrimary, protocol: Protocol, dataset: DatasetSpec,
                 arms: dict[str, Arm], directory: Path, stop_on_failure: bool,
                 after: CellHook | None = None, verdicts: Verdicts | None = None) -> Merged:
    """Run every pending cell into `directory` and summarize it (the bench Report); `after`:
    called in each cell once its load and probes are done (runner.CellHook); `verdicts`:
    vLLM's answers the command already has (the arms are asked together into it)."""
    inputs = checked_inputs(protocol, dataset)
    checked, prompts = inputs.dataset, inputs.prompts
    print(f"dspark: run directory {shlex.quote(str(directory))}", file=sys.stderr)

    asked = verdicts if verdicts is not None else Verdicts()

    def prepare_arms(pending: list[Arm]) -> dict[str, ArmLaunch]:
        ask_vllm_together([(arm.cfg, arm.plan) for arm in pending], asked)
        return {arm.name: arm_launch(arm, directory / ARMS_DIR / arm.name, asked)
                for arm in pending}

    with stop_signals_as_interrupt():
        ctx = CellContext(protocol=protocol, dataset=checked, run_dir=directory,
                          fatal=fatal_patterns(cfg.logs), degraded=degraded_patterns(cfg.logs),
                          prompts=prompts, after=after,
                          stall=settings_of(cfg.watch.stall_s, cfg.watch.poll_s),
                          min_acceptance=cfg.watch.min_acceptance,
                          fallbacks=fallback_patterns(cfg.logs),
                          gpu_tool=gpu_tool(cfg.watch.gpu_interval_s),
                          gpu_interval_s=float(cfg.watch.gpu_interval_s or 0.0),
                          gpu_idle_below=float(cfg.watch.gpu_idle_below))
        run_cells(protocol.cells, arms, prepare_arms, ctx, stop_on_failure)
    return merge(directory, this_launch(cfg))


def gpu_tool(interval_s: float | None) -> str | None:
    """The vendor tool every cell samples its GPUs with (`watch.gpu_interval_s`); None, said
    once, where there is none (a CPU machine) or sampling is off."""
    if not interval_s:
        return None
    tool = find_tool()
    if tool is None:
        progress(f"GPU sampling: none of {', '.join(TOOLS)} on PATH (a CPU machine?): the "
                 "cells record no GPU samples")
    return tool


def ask_vllm_ahead(cfg: BenchPrimary, verdicts: Verdicts) -> None:
    """Have vLLM asked about the arms `bench_in(cfg, ...)` will start together with the next
    command asked about in their environment with `verdicts` (`validate`'s smoke, which boots
    first): one vLLM import for both stages. A plan that fails here is left for the bench to
    report, and a port claimed differently later is asked about again (answers are kept by
    exact command)."""
    try:
        arms = compose_arms(cfg, protocol_of(cfg)[0])
    except DsparkError:
        return
    ask_vllm_together([(arm.cfg, arm.plan) for arm in arms.values()], verdicts)


def bench_in(cfg: BenchPrimary, directory: Path, stop_on_failure: bool,
             after: CellHook | None = None, verdicts: Verdicts | None = None) -> Merged:
    """Run the protocol of `cfg.bench` into `directory` on the ports this job claims, and
    summarize it (the bench Report); `verdicts`: vLLM's answers the command already has."""
    protocol, dataset = protocol_of(cfg)
    with claimed_ports(cfg) as claimed:
        arms = compose_arms(claimed, protocol)
        return run_protocol(claimed, protocol, dataset, arms, directory, stop_on_failure,
                            after, verdicts)


def print_merged(merged: Merged, as_json: bool) -> int:
    """`dspark bench`'s answer: the summary on stdout (a table, or JSON), the run directory's
    path last; exit 1 when a cell is invalid (its reasons are in summary.json)."""
    summary = merged.summary
    if as_json:
        print_json({
            "run_dir": str(merged.directory),
            "files": {"summary_json": str(merged.summary_json),
                      "summary_csv": str(merged.summary_csv),
                      "plot_png": str(merged.plot_png) if merged.plot_png else None},
            **summary.as_dict(),
        })
    else:
        output().print(table(for_terminal(summary)))
        print(merged.directory)
    if merged.plot_png is None:
        print("dspark: summary.png not drawn: matplotlib is not installed (pip install "
              "'dspark[plot]')", file=sys.stderr)
    invalid = [c for c in summary.cells if not c.valid]
    if invalid:
        names = printable(", ".join(c.cell_id for c in invalid))
        print(f"dspark: {len(invalid)} of {len(summary.cells)} cells invalid ({names}); their "
              "reasons are in summary.json and excluded from every speedup", file=sys.stderr)
        return int(ExitCode.CHECK_FAILED)
    return int(ExitCode.OK)
