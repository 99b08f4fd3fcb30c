"""Run the cells of a protocol, one cold server session each, and record every cell.

Per cell: boot from the arm's checked launch (here, on several local nodes, or as its own job
on a cluster engine: `arm_launch`), wait for health, run the warmup phases, read
/metrics, run the measured phase, read /metrics again once it settles, then tear the server
down. The session watches the log the whole time; a fatal line or a dead server ends the cell
early instead of waiting out a hung phase. A finished valid cell is skipped on a re-run.

The phases of every cell run in a load generator (`loadgen.LoadGenerator`) kept for the whole
run, one per load environment (at most one per arm: the arms alternate), started before the
first boot that needs it so that its import of vLLM overlaps the boot; a phase that stalls or
times out ends it, and the next cell that needs it starts another. Each cell records which
process ran its phases (`load_generator`: pid, log, phases run so far).

An arm is made startable where its deploy target runs it (`arm_launch`) through the one start
step (`deploy/start.py`): the checks, the model and the arm's run record happen once, before the
first boot; each cell then gets a fresh deployment whose files (log, job script) go into the
cell's directory.

A cell's engagement probe (`probe`): after the measured phase (its counters already read), as
many completions at once as the cell's concurrency, so the server batches them as under the
load, sampled as the protocol samples (at most MAX_TOKENS each: enough verify steps). Their
steps, read from the launch as `dspark serve` starts it (per-request metrics where the server
reports them, else /metrics' spec-decode counters around the probe: `metrics.observed`), say
whether verification trimmed: what the cell's record keeps as `engagement`, beside the DSpark
draft's parameter count against its pin (`draft_params`). Waited for under the session's
watches (`lossless.watched`): a stalled engine ends it at once, not at its HTTP timeout.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.bench import records
from dspark_cli.bench.arms import Arm
from dspark_cli.bench.cell import (
    CellRecord,
    CellTimings,
    Observed,
    acceptance_flag,
    adaptive_reasons,
    build,
)
from dspark_cli.bench.dataset import VerifiedDataset, describe
from dspark_cli.bench.loadgen import LoadGenerator, PhaseRun, phase_argv
from dspark_cli.bench.lossless import PromptSet, Stopped, answer, compare, reference_record, watched
from dspark_cli.bench.protocol import Cell, Protocol, Sampling
from dspark_cli.console import json_text, progress
from dspark_cli.deploy.start import ready
from dspark_cli.errors import ServerError, UsageError
from dspark_cli.launch.effective import EffectiveLaunch
from dspark_cli.launch.render import plan_dict
from dspark_cli.launch.secrets import SCRUB
from dspark_cli.machine.gpu_sampler import GpuSampler, Sample, samples_dict
from dspark_cli.machine.gpu_sampler import record as gpu_record
from dspark_cli.server import bootcache
from dspark_cli.server.bootcache import (
    PROFILE_CACHE_VAR,
    cache_dirs,
    cache_env,
    compared,
    read_boot_caches,
    vllm_has,
)
from dspark_cli.server.deployment import Deployment, Watch, inductor_cache_dir
from dspark_cli.server.http import exchange
from dspark_cli.server.liveness import StallSettings
from dspark_cli.server.logscan import Pattern, degraded_lines, read_cold_start, seen_params
from dspark_cli.server.metrics import (
    Engagement,
    RequestSteps,
    Scrape,
    ScrapeError,
    judge,
    observed,
    request_steps,
    spec_decode,
)
from dspark_cli.untrusted import write_atomic
from dspark_cli.vllm.accepts import Verdicts

if TYPE_CHECKING:  # the live session and its HTTP client load when a cell boots (`run`)
    import httpx

    from dspark_cli.server.session import ServerSession


@dataclass(frozen=True)
class ArmLaunch:
    """What every cell of an arm starts: `deployment(cell_dir, env)` (`env` over the launch's);
    `argv` is the head's command for the record, `env` the load generator's environment,
    `ready_timeout_s` and `metrics_settle_s` the arm's (server.*)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    deployment: Callable[[Path, Mapping[str, str]], Deployment]
    ready_timeout_s: float
    metrics_settle_s: float


def arm_launch(arm: Arm, record_dir: Path, verdicts: Verdicts | None = None) -> ArmLaunch:
    """Check and prepare `arm` (CheckFailed/UsageError before anything boots), writing its run
    record into `record_dir`; `verdicts`: vLLM's answers the command already has."""
    start = ready(arm.cfg, arm.plan, record_dir, check_port=False, verdicts=verdicts)
    return ArmLaunch(start.head_argv, start.load_env, start.deployment,
                     float(arm.cfg.server.ready_timeout_s),
                     float(arm.cfg.server.metrics_settle_s))


GPU_SAMPLES = "gpus.json"  # a cell's every GPU sample, beside its cell.json
COLD_CACHES = "caches"  # a cold boot's private cache directories (bench.warm_caches=false)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# Called with the cell's id, arm, launch and session once its load and probes are done, while
# its server is still up and watched (validate's accuracy stage scores an arm there).
CellHook = Callable[[str, Arm, ArmLaunch, "ServerSession"], None]


@dataclass(frozen=True)
class CellContext:  # what every cell of one run shares
    run_dir: Path
    protocol: Protocol
    dataset: VerifiedDataset
    fatal: tuple[Pattern, ...]
    prompts: PromptSet | None = None  # the lossless check's pinned prompts
    degraded: tuple[Pattern, ...] = ()  # vLLM overrode what was asked: the cell is degraded
    after: CellHook | None = None
    stall: StallSettings | None = None  # the stall watch (`watch.stall_s`); None: off
    min_acceptance: float | None = 0.0  # `watch.min_acceptance`: at or below it, flagged
    fallbacks: tuple[Pattern, ...] = ()  # `logs.fallbacks`: speculation ran other than asked
    gpu_tool: str | None = None  # the GPU vendor tool that samples every cell (None: none)
    gpu_interval_s: float = 1.0  # `watch.gpu_interval_s`
    gpu_idle_below: float = 10.0  # `watch.gpu_idle_below`


def profiles_of(cfg: Any) -> dict[str, str]:
    """The config groups the cell ran under, by name (a later dry run's estimate finds it)."""
    return {group: str(getattr(cfg, group).name)
            for group in ("hw", "model", "speculative", "compilation", "serving")}


def _dataset_info(dataset: VerifiedDataset) -> dict[str, Any]:
    spec = dataset.spec
    return {"kind": spec.kind, "file": None if spec.request_file is None
            else str(spec.request_file), "sha256": dataset.sha256, "rows": dataset.rows,
            "seed": spec.seed, "input_tokens": spec.input_tokens}


@dataclass(frozen=True)
class _Ended:
    """What a cell's server showed by its end: its log judged before the teardown (fatal,
    degraded and fallback lines, the draft's parameter count), the stall watch's evidence, and
    how long the teardown took."""

    fatal_lines: tuple[str, ...] = ()
    degraded: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()
    params: dict[str, Any] | None = None
    stall: dict[str, Any] | None = None
    teardown_s: float = 0.0


class _CellRun:
    """One cell's side effects, in order, gathered into `Observed`."""

    def __init__(self, cell: Cell, arm: Arm, launch: ArmLaunch, ctx: CellContext,
                 loadgen: LoadGenerator) -> None:
        self.cell, self.arm, self.launch, self.ctx = cell, arm, launch, ctx
        self.loadgen = loadgen
        self.dir = records.cell_dir(ctx.run_dir, cell.id)
        self.errors: list[str] = []
        self.phases: list[PhaseRun] = []
        self.before: Scrape | None = None
        self.after: Scrape | None = None
        self.boot_s: float | None = None
        self.greedy: dict[str, Any] | None = None  # the lossless probe's answers
        self.engaged: Engagement | None = None  # the engagement probe's steps
        self.measured_argv: list[str] = []  # the measured phase's load generator command
        self.sampler = GpuSampler(ctx.gpu_interval_s, ctx.gpu_tool)
        self.window: tuple[float, float] | None = None  # the measured phase, sampler's clock
        self.cache_dirs: dict[str, Path] = {}  # the boot's cache directories, by variable
        self.dirs_before: dict[str, int] = {}
        self.dirs_after: dict[str, int] | None = None  # once healthy (None: never)

    def run(self) -> CellRecord:
        """Boot, load and probe the cell's server, stop it, and judge what was seen."""
        from dspark_cli.server.session import ServerSession

        self.dir.mkdir(parents=True)
        started_at, start = _now(), time.monotonic()
        watch = self._watch()
        caches = cache_env(self.ctx.protocol.warm_caches, self.dir / COLD_CACHES,
                           vllm_has(PROFILE_CACHE_VAR))
        boot_env = {**self.launch.env, **caches}
        self.cache_dirs = cache_dirs(boot_env, inductor_cache_dir(boot_env))
        self.dirs_before = bootcache.snapshot(self.cache_dirs)
        session = ServerSession(self.launch.deployment(self.dir, caches), watch)
        local = not session.deployment.queued  # a cluster's nodes have GPUs of their own
        if local:
            self.sampler.start()
        try:
            ended = self._serve(session)
        finally:
            samples = self.sampler.stop()
            shutil.rmtree(self.dir / COLD_CACHES, ignore_errors=True)  # a cold boot's, used
        gpus = self._gpus(samples) if local else None
        asked = EffectiveLaunch.of(self.arm.plan).adaptive
        self.errors.extend(adaptive_reasons(asked, ended.fallbacks, ended.params))
        if ended.stall is not None and not any(e.startswith("stalled") for e in self.errors):
            self.errors.insert(0, str(ended.stall["sentence"]))  # it tripped outside a phase
        seen = self._observed(session, ended, started_at, time.monotonic() - start)
        return build(seen, self.ctx.protocol,
                     self._carried(session, ended, asked, caches, gpus))

    def _watch(self) -> Watch:
        """What the session watches besides health: fatal lines, the degraded and fallback
        families and the DSpark draft's load line, the counters, the stall."""
        draft = self.arm.draft_params
        return Watch(self.launch.ready_timeout_s, self.ctx.fatal,
                     (*self.ctx.degraded, *self.ctx.fallbacks,
                      *((draft.pattern,) if draft else ())),
                     metrics_timeout_s=self.ctx.protocol.metrics_timeout_s,
                     metrics_settle_s=self.launch.metrics_settle_s, stall=self.ctx.stall)

    def _serve(self, session: ServerSession) -> _Ended:
        """The session's life: boot, load and probes, then the log judged up to the teardown
        (lines printed while the server stops do not count) and the teardown timed."""
        ended = _Ended()
        try:
            with session:
                try:
                    self._boot_and_load(session)
                finally:
                    ended = self._judged_log(session)
                    t0 = time.monotonic()
                    session.close()
                    ended = replace(ended, teardown_s=time.monotonic() - t0)
        except ServerError as exc:  # the session could not start (a busy port, no binary,
            # a job the engine refused)
            self.errors.append(exc.reason)
        return ended

    def _judged_log(self, session: ServerSession) -> _Ended:
        """What the server's log and the stall watch showed before the teardown."""
        snapshot = session.log_snapshot()
        draft = self.arm.draft_params
        return _Ended(
            fatal_lines=tuple(f"{e.pattern}: {e.line}"
                              for e in (snapshot.fatal if snapshot else ())),
            degraded=degraded_lines(snapshot, self.ctx.degraded),
            fallbacks=degraded_lines(snapshot, self.ctx.fallbacks),
            params=seen_params(draft, snapshot)
            if draft is not None and snapshot is not None else None,
            stall=session.stall_evidence())  # the log's tail before the teardown's

    def _observed(self, session: ServerSession, ended: _Ended, started_at: str,
                  total_s: float) -> Observed:
        return Observed(
            cell=self.cell, phases=tuple(self.phases), before=self.before, after=self.after,
            boot_s=self.boot_s, fatal_lines=ended.fatal_lines, errors=tuple(self.errors),
            teardown=session.teardown,
            timings=CellTimings(self.boot_s or 0.0, sum(p.duration_s for p in self.phases),
                                ended.teardown_s, total_s),
            started_at=started_at, finished_at=_now(), lossless=self._compared(),
            degraded=ended.degraded,
            engagement=None if self.arm.expected_steps is None else engagement_record(
                self.engaged, self.arm.expected_steps),
            draft_params=ended.params)

    def _carried(self, session: ServerSession, ended: _Ended, asked: bool,
                 caches: Mapping[str, str], gpus: dict[str, Any] | None) -> dict[str, Any]:
        """The context cell.json keeps as is: the request set, the launch, the log, the
        watches' sections, the boot's caches."""
        return {
            "dataset": _dataset_info(self.ctx.dataset),
            "launch": {"argv": list(self.launch.argv), "plan": plan_dict(self.arm.plan),
                       "base_url": session.base_url},
            "server_log": str(session.log_path), "stall": ended.stall,
            "request_set": describe(self.ctx.dataset, self.measured_argv),
            "gpus": gpus, "adaptive_asked": asked, "fallbacks": list(ended.fallbacks),
            "load_generator": self.loadgen.describe(), "profiles": profiles_of(self.arm.cfg),
            "acceptance_check": acceptance_flag(self._spec(), self.ctx.min_acceptance),
            "cold_start": self._cold_start(session.log_path),
            "caches": {"warm": self.ctx.protocol.warm_caches, "env": dict(caches),
                       "boot": None if session.log_path is None
                       else read_boot_caches(session.log_path),
                       "dirs": None if self.dirs_after is None else compared(
                           self.cache_dirs, self.dirs_before, self.dirs_after)}}

    def _boot_and_load(self, session: ServerSession) -> None:
        try:
            self.boot_s = session.wait_healthy()
        except ServerError as exc:
            self.errors.append(f"boot: {exc.reason}")
            return
        progress(f"{self.cell.id}: healthy after {self.boot_s:.1f} s")
        self.dirs_after = bootcache.snapshot(self.cache_dirs)  # what the boot itself compiled
        for phase in self.cell.phases:
            if phase.measured:
                self.before = self._scrape(session.scrape, "before")
            argv = phase_argv(phase, self.ctx.protocol.requests, self.ctx.dataset.spec,
                              self.arm.plan, self.dir, base_url=session.base_url,
                              objectives=self.ctx.protocol.objectives)
            if phase.measured:
                self.measured_argv = argv
            progress(f"{self.cell.id}: {phase.name}: {phase.num_prompts} requests at "
                     f"concurrency {phase.concurrency}, up to {phase.output_tokens} tokens")
            began = self.sampler.now()
            result = self.loadgen.run(argv, phase, self.dir, self.ctx.protocol.phase_timeout_s,
                                      session.stop_reason)
            if phase.measured:
                self.window = (began, self.sampler.now())
            self.phases.append(result)
            if result.error:
                stalled = session.stalled
                self.errors.append(f"{stalled.reason} (in {phase.name}, after "
                                   f"{result.duration_s:.0f} s)" if stalled else result.error)
                return
            if phase.measured:
                self.after = self._settled(session, (result.result or {}).get(
                    "total_output_tokens"))
        if self.ctx.prompts is not None:  # after the counters were read: they stay the load's
            progress(f"{self.cell.id}: lossless: {len(self.ctx.prompts.prompts)} greedy prompts")
            began = time.monotonic()
            self.greedy = answer(session.http, session.base_url, self.arm.plan.served_model_name,
                                 self.ctx.prompts, self.ctx.protocol.phase_timeout_s,
                                 session.stop_reason)
            if self._stalled(session, "the lossless probe", began):
                return
        if self.arm.expected_steps is not None:
            progress(f"{self.cell.id}: engagement: {self.cell.concurrency} requests at once")
            began = time.monotonic()
            self.engaged = probe(session.http, session.base_url, self.arm.plan.served_model_name,
                                 self.ctx.prompts.prompts if self.ctx.prompts else PROMPTS,
                                 self.cell.concurrency, self.ctx.protocol.requests,
                                 self.ctx.protocol.phase_timeout_s,
                                 self.arm.cfg.speculative.num_speculative_tokens,
                                 lambda: _quiet(session.scrape), session.stop_reason,
                                 self.arm.cfg.model.expected.draft_exact is True)
            if self._stalled(session, "the engagement probe", began):
                return
        if self.ctx.after is not None:
            self.ctx.after(self.cell.id, self.arm, self.launch, session)

    def _stalled(self, session: ServerSession, where: str, began: float) -> bool:
        """A probe the stall watch ended: the cell is invalid as `stalled`, like a phase."""
        stalled = session.stalled
        if stalled is not None:
            self.errors.append(f"{stalled.reason} (in {where}, after "
                               f"{time.monotonic() - began:.0f} s)")
        return stalled is not None

    def _gpus(self, samples: list[Sample]) -> dict[str, Any] | None:
        """The cell's `gpus` section (every sample in its own gpus.json); None: not sampled."""
        if self.ctx.gpu_tool is None:
            return None
        write_atomic(self.dir / GPU_SAMPLES, json.dumps(samples_dict(samples)) + "\n")
        return {**gpu_record(self.ctx.gpu_tool, self.ctx.gpu_interval_s, samples, self.window,
                             self.ctx.gpu_idle_below, self.sampler.problem),
                "file": GPU_SAMPLES}

    def _cold_start(self, log: Path | None) -> dict[str, Any] | None:
        """The boot's phases from its log (server/logscan.py), with what came before the first
        line (vLLM's imports) from the measured boot-to-health time."""
        found = read_cold_start(log) if log is not None else None
        if found is not None and self.boot_s is not None and found["total_s"] is not None:
            found["boot_s"] = round(self.boot_s, 1)
            found["before_first_line_s"] = round(max(self.boot_s - found["total_s"], 0.0), 1)
        return found

    def _spec(self) -> dict[str, Any] | None:
        """The measured phase's spec-decode counters (None: no drafter, or unread)."""
        if self.before is None or self.after is None:
            return None
        spec = spec_decode(self.after.delta(self.before))
        return None if spec is None else spec.as_dict()

    def _compared(self) -> dict[str, Any] | None:
        """The probe's answers with their comparison against the reference arm's earliest
        cell recorded so far (this one, if it is that); none yet: the summary compares."""
        if self.greedy is None or self.ctx.protocol.lossless is None:
            return None
        reference = self.ctx.protocol.lossless.reference
        candidates = [(c.id, c.arm, self.greedy if c == self.cell else self._recorded(c.id))
                      for c in self.ctx.protocol.cells if c.arm == reference]
        found = reference_record(candidates, reference)
        comparison = None if found is None else compare(found[0], found[1], self.greedy)
        return {**self.greedy,
                "comparison": None if comparison is None else comparison.to_dict()}

    def _recorded(self, cell_id: str) -> Mapping[str, Any] | None:
        path = records.cell_dir(self.ctx.run_dir, cell_id) / records.CELL_JSON
        try:
            return records.read(path).lossless if path.is_file() else None
        except UsageError:
            return None

    def _settled(self, session: ServerSession, tokens: int | None) -> Scrape | None:
        """/metrics after the measured phase, once the server's count has caught up."""
        before = self.before
        if before is None or tokens is None:
            return self._scrape(session.scrape, "after")
        return self._scrape(lambda: session.scrape_settled(before, tokens), "after")

    def _scrape(self, read: Callable[[], Scrape], when: str) -> Scrape | None:
        try:
            return read()
        except ScrapeError as exc:
            self.errors.append(f"/metrics {when} the measured phase: {exc}")
            return None


def _quiet(read: Callable[[], Scrape]) -> Scrape | None:
    """/metrics for the engagement probe: unreadable is no counters, not an invalid cell."""
    try:
        return read()
    except ScrapeError:
        return None


LOADGEN_DIR = "loadgen"  # the load generators' own logs, one per process, in the run directory


def start_loadgen(ctx: CellContext, cell: Cell, launch: ArmLaunch) -> LoadGenerator:
    """A load generator for `cell`'s arm, its log named after the cell it starts for."""
    logs = ctx.run_dir / LOADGEN_DIR
    logs.mkdir(parents=True, exist_ok=True)
    return LoadGenerator(launch.env, logs / f"{cell.id}.log")


def run_cell(cell: Cell, arm: Arm, launch: ArmLaunch, ctx: CellContext,
             loadgen: LoadGenerator) -> CellRecord:
    """Run one cell with `loadgen` and write its cell.json; an earlier unfinished attempt is
    moved aside."""
    moved = records.set_aside(ctx.run_dir, cell.id)
    if moved is not None:
        progress(f"{cell.id}: earlier attempt kept in {moved}")
    record = _CellRun(cell, arm, launch, ctx, loadgen).run()
    path = records.cell_dir(ctx.run_dir, cell.id) / records.CELL_JSON
    write_atomic(path, SCRUB(json_text(record.to_dict())))
    return record


def run_cells(cells: Sequence[Cell], arms: dict[str, Arm],
              prepare: Callable[[list[Arm]], dict[str, ArmLaunch]], ctx: CellContext,
              stop_on_failure: bool) -> list[CellRecord]:
    """Run the cells in order, skipping finished valid ones; returns the records of this run.

    Every arm a pending cell needs is prepared (preflight, vLLM's validation, the record)
    before the first boot, so a wrong arm fails in seconds, not after hours of other cells.
    """
    pending = [c for c in cells if records.finished_valid(ctx.run_dir, c.id) is None]
    for cell in cells:
        if cell not in pending:
            progress(f"{cell.id}: finished and valid in an earlier run; skipped")
    prepared = prepare([arms[name] for name in dict.fromkeys(c.variant for c in pending)])
    done = []
    # One per load environment (at most one per arm), kept from cell to cell: arms alternate.
    loadgens: dict[frozenset[tuple[str, str]], LoadGenerator] = {}
    try:
        for i, cell in enumerate(pending, start=1):
            tag = f"[{i}/{len(pending)}] {cell.id}"
            key = frozenset(prepared[cell.variant].env.items())
            loadgen = loadgens.get(key)
            if loadgen is None or not loadgen.usable:
                if loadgen is not None:
                    loadgen.close()
                loadgen = loadgens[key] = start_loadgen(ctx, cell, prepared[cell.variant])
                progress(f"{tag}: load generator started (pid {loadgen.pid})")
            progress(f"{tag}: booting a cold server")
            record = run_cell(cell, arms[cell.variant], prepared[cell.variant], ctx, loadgen)
            done.append(record)
            if record.valid:
                progress(f"{tag}: valid, {record.output_throughput:.1f} output tok/s")
            else:
                progress(f"{tag}: INVALID: {'; '.join(record.reasons)}")
                if stop_on_failure:
                    progress("stopping at the first invalid cell (--stop-on-failure)")
                    break
            if record.teardown is not None and not record.teardown.clean:
                raise ServerError(
                    f"{cell.id}: the server's teardown left processes or the port busy, so "
                    "later cells cannot boot cleanly; stopping.",
                    hint=f"Check for leftover vLLM processes; the cell's log is in "
                    f"{ctx.run_dir}.")
    finally:
        for loadgen in loadgens.values():
            loadgen.close()
    return done


# The prompts when the protocol has no pinned greedy prompts to reuse.
PROMPTS = ("Speculative decoding drafts tokens that the target model verifies.",)
MAX_REQUESTS = 64  # a probe at concurrency 256 sends 64: enough steps, minutes saved
MAX_TOKENS = 256


def _one(client: httpx.Client, url: str, body: dict[str, Any],
         timeout_s: float) -> RequestSteps | str | None:
    """One answer's steps (None: it carried none), or why it could not be read."""
    import httpx

    try:
        response = exchange(client, "POST", url, json=body, deadline_s=timeout_s)
        response.raise_for_status()
        return request_steps(response.json())
    except httpx.HTTPStatusError as exc:
        return f"HTTP {exc.response.status_code}"
    except (httpx.HTTPError, ValueError) as exc:
        return " ".join(f"{type(exc).__name__}: {exc}".split())


def probe(client: httpx.Client, base_url: str, model: str, prompts: Sequence[str], concurrency: int,
          sampling: Sampling, timeout_s: float, k: int | None,
          scrape: Callable[[], Scrape | None],
          stop: Callable[[], str | None] = lambda: None, exact: bool = False) -> Engagement:
    """`concurrency` (at most MAX_REQUESTS) completions at once through the cell's session's
    `client`, sampled as `sampling` says; `scrape` reads /metrics (None when it cannot) before
    and after them. Not measured, with the reason, when `stop()` names one before they are all
    answered (a stall). An `exact` draft's counters show the verify widths on greedy requests
    only (`metrics.observed`)."""
    count = max(1, min(concurrency, MAX_REQUESTS))
    bodies = [{"model": model, "prompt": prompts[i % len(prompts)], "ignore_eos": True,
               "max_tokens": min(sampling.max_output_tokens, MAX_TOKENS),
               "temperature": sampling.temperature, "top_p": sampling.top_p}
              for i in range(count)]
    before = scrape()
    pool = ThreadPoolExecutor(count)
    try:
        answers = watched(lambda: list(pool.map(
            lambda b: _one(client, f"{base_url}/v1/completions", b, timeout_s), bodies)), stop)
    finally:  # a stalled server's requests end with its teardown: no wait for them here
        pool.shutdown(wait=False, cancel_futures=True)
    if isinstance(answers, Stopped):
        return Engagement(None, 0, 0, 0, 0, 0, k, None,
                          why=f"the probe was given up: {answers.reason}")
    after = scrape()
    counters = None if before is None or after is None else spec_decode(after.delta(before))
    return observed([a for a in answers if not isinstance(a, str)],
                    [a for a in answers if isinstance(a, str)], counters, k,
                    exact and sampling.temperature == 0)


def engagement_record(seen: Engagement | None, expected: str | None) -> dict[str, Any]:
    """The cell's `engagement` section: what was expected, what the steps showed, and the
    outcome (`trimmed`, `full_k`, `unexpected_trim`, `not_measured`) with `ok`."""
    if seen is None:
        seen = Engagement(None, 0, 0, 0, 0, 0, None, None,
                          why="the cell ended before its probe")
    verdict = judge(seen, expected)
    return {**seen.to_dict(), "expected": expected, "outcome": verdict.outcome,
            "ok": verdict.ok, "sentence": verdict.sentence}
