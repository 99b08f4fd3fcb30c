"""The plan of a benchmark protocol (pure): which cells run, in which order, with which phases.

A cell is one repeat of one arm (a speculative profile) at one concurrency, on its own cold
server. Every cell runs the protocol's warmup phases and then one measured phase; only the
measured phase counts. Repeats of a cell are independent cold boots, so their spread measures
the run-to-run noise the statistics need. With `bench.prefix_caching: [on, off]` every arm
also runs with vLLM's prefix caching off: the same cells again, each variant its own launch
(`variant`), recorded as the arm's name and a `prefix_caching` field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dspark_cli.bench.goodput import Objectives, objectives
from dspark_cli.bench.lossless import LosslessSpec, lossless_spec
from dspark_cli.errors import UsageError

if TYPE_CHECKING:  # the records' readers (report) need no schema
    from dspark_cli.config.bench import BenchConf

# vLLM's `--max-num-seqs` when neither the serving profile nor the hardware sets it.
VLLM_DEFAULT_MAX_NUM_SEQS = 128


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_p: float
    max_output_tokens: int
    ignore_eos: bool


@dataclass(frozen=True)
class Phase:
    """One run of the load generator against a cell's server."""

    name: str
    num_prompts: int
    concurrency: int
    output_tokens: int
    measured: bool


# What a variant with prefix caching off adds to its arm's name; `+` is in no config option's
# name, so a variant never shadows an arm.
PREFIX_CACHING_OFF = "+pc-off"


def variant(arm: str, prefix_caching: bool = True) -> str:
    """The launch a cell runs, named: its arm, or the arm with prefix caching off."""
    return arm if prefix_caching else f"{arm}{PREFIX_CACHING_OFF}"


def split_variant(name: str) -> tuple[str, bool]:
    """(arm, prefix caching) of a `variant` name: what `speculative=<arm>` composes."""
    if name.endswith(PREFIX_CACHING_OFF):
        return name[: -len(PREFIX_CACHING_OFF)], False
    return name, True


def cell_id(arm: str, prefix_caching: bool, concurrency: int, repeat: int, repeats: int) -> str:
    """A cell's id, planned or read back: directory-safe, unique within a protocol, sortable by
    eye; a single-repeat protocol keeps the short id."""
    base = f"{variant(arm, prefix_caching)}-c{concurrency}"
    return base if repeats == 1 else f"{base}-r{repeat}"


def on_off(prefix_caching: bool) -> str:
    return "on" if prefix_caching else "off"


@dataclass(frozen=True)
class Cell:
    arm: str
    concurrency: int
    phases: tuple[Phase, ...]
    repeat: int = 1  # 1-based
    repeats: int = 1  # the protocol's: a single-repeat protocol keeps the short id
    prefix_caching: bool = True  # False: `serving.args.enable_prefix_caching=false`

    @property
    def variant(self) -> str:
        """The launch this cell runs (`variant`): the arm, or the arm with prefix caching off."""
        return variant(self.arm, self.prefix_caching)

    @property
    def id(self) -> str:
        return cell_id(self.arm, self.prefix_caching, self.concurrency, self.repeat,
                       self.repeats)

    @property
    def measured(self) -> Phase:
        return self.phases[-1]


@dataclass(frozen=True)
class Protocol:
    """A benchmark protocol. What identifies it comes first: every cell.json records it
    (`to_dict`), and records of different protocols never mix. The rest is what a run of it
    plans (`build_protocol`); a protocol read back from a record (`from_dict`) plans nothing:
    no cells, no sampling."""

    name: str
    arms: tuple[str, ...]
    baseline: str
    concurrencies: tuple[int, ...]
    repeats: int = 1
    equivalence_margin: float = 0.05
    objectives: Objectives | None = None  # None: no latency objective, no goodput
    prefix_caching: tuple[bool, ...] = (True,)  # the axis: each arm with it on and/or off
    sampling: Sampling | None = None  # None: read back from a record
    cells: tuple[Cell, ...] = ()  # the selected cells, in run order
    phase_timeout_s: float = 7200.0
    metrics_timeout_s: float = 10.0
    lossless: LosslessSpec | None = None  # None: no greedy check
    warm_caches: bool = True  # False: every boot with fresh private caches (`bench.warm_caches`)

    @property
    def variants(self) -> tuple[str, ...]:
        """Every arm under every prefix-caching setting, arm-major (`variant`)."""
        return tuple(variant(a, pc) for a in self.arms for pc in self.prefix_caching)

    @property
    def baseline_variant(self) -> str:
        """The launch every speedup is measured against: the baseline as first listed."""
        return variant(self.baseline, self.prefix_caching[0])

    @property
    def requests(self) -> Sampling:
        """How every request of a planned protocol samples; ValueError for a protocol read
        back from a record, which plans no request."""
        if self.sampling is None:
            raise ValueError(f"protocol {self.name!r} was read back from a record: it plans no "
                             "request")
        return self.sampling

    def cell(self, arm: str, concurrency: int, repeat: int = 1,
             prefix_caching: bool = True) -> Cell | None:
        return next((c for c in self.cells if (c.arm, c.concurrency, c.repeat, c.prefix_caching)
                     == (arm, concurrency, repeat, prefix_caching)), None)

    def to_dict(self) -> dict[str, Any]:
        """What identifies the protocol, as every cell.json records it."""
        return {"name": self.name, "arms": list(self.arms), "baseline": self.baseline,
                "concurrencies": list(self.concurrencies), "repeats": self.repeats,
                "equivalence_margin": self.equivalence_margin,
                "objectives": None if self.objectives is None else self.objectives.to_dict(),
                "prefix_caching": list(self.prefix_caching)}

    @classmethod
    def from_dict(cls, p: Mapping[str, Any]) -> Protocol:
        """A record's protocol (its fields' types checked by the reader). Records written
        before repeats existed are one repeat with the default margin; before objectives,
        none; before the prefix-caching axis, on only."""
        return cls(str(p["name"]), tuple(p["arms"]), str(p["baseline"]),
                   tuple(int(c) for c in p["concurrencies"]), int(p.get("repeats", 1)),
                   float(p.get("equivalence_margin", 0.05)),
                   Objectives.from_dict(p.get("objectives")),
                   tuple(p.get("prefix_caching") or (True,)))


def _unique(items: Sequence[Any], what: str) -> None:
    seen = [x for i, x in enumerate(items) if x in items[:i]]
    if seen:
        raise UsageError(f"{what} lists {seen[0]!r} twice.", hint=f"Give each of {what} once.")


def phases_for(bench: BenchConf, concurrency: int) -> tuple[Phase, ...]:
    """Warmups in config order (a null warmup concurrency is the cell's), then the measured."""
    warmups = tuple(
        Phase(name=f"warmup{i}", num_prompts=w.num_prompts,
              concurrency=concurrency if w.concurrency is None else w.concurrency,
              output_tokens=w.output_tokens, measured=False)
        for i, w in enumerate(bench.warmups, start=1))
    return (*warmups, Phase(name="measured", num_prompts=bench.measured_prompts,
                            concurrency=concurrency,
                            output_tokens=bench.sampling.max_output_tokens, measured=True))


def build_protocol(bench: BenchConf) -> Protocol:
    """Lay out the cells of a `bench` config; UsageError where its parts disagree (the schema
    has checked each value's type and range)."""
    arms = tuple(bench.arms)
    if not arms:
        raise UsageError("bench.arms is empty: a protocol needs at least one arm.")
    _unique(arms, "bench.arms")
    if bench.baseline not in arms:
        raise UsageError(
            f"bench.baseline {bench.baseline!r} is not one of bench.arms {list(arms)}.",
            hint="Set bench.baseline to one of the arms.",
        )
    concurrencies = tuple(bench.concurrencies)
    if not concurrencies:
        raise UsageError("bench.concurrencies is empty: a protocol needs at least one.")
    _unique(concurrencies, "bench.concurrencies")

    only_arm, only_c, only_r = bench.arm, bench.concurrency, bench.repeat
    if only_arm is not None and only_arm not in arms:
        raise UsageError(
            f"bench.arm={only_arm} is not one of bench.arms {list(arms)}.",
            hint="Pick one of the protocol's arms, or leave bench.arm unset to run them all.",
        )
    if only_c is not None and only_c not in concurrencies:
        raise UsageError(
            f"bench.concurrency={only_c} is not one of bench.concurrencies {list(concurrencies)}.",
            hint="Pick one of the protocol's concurrencies, or leave bench.concurrency unset.",
        )
    repeats = bench.repeats
    if only_r is not None and only_r not in range(1, repeats + 1):
        raise UsageError(
            f"bench.repeat={only_r} is not one of the repeats 1..{repeats} (bench.repeats).",
            hint="Pick a repeat from 1 to bench.repeats, or leave bench.repeat unset.",
        )
    caching = prefix_caching_axis(bench.prefix_caching)
    launches = [(arm, pc) for arm in arms for pc in caching]
    # Concurrency-major, and within a concurrency one pass over the arms (each under every
    # prefix-caching setting) per repeat, the passes in alternating order (A/B, then B/A):
    # slow drift of the machine, or a warm page cache that favours whoever runs second,
    # touches every arm alike.
    cells = tuple(
        Cell(arm, c, phases_for(bench, c), r, repeats, pc)
        for c in concurrencies
        if only_c in (None, c)
        for r in range(1, repeats + 1)
        if only_r in (None, r)
        for arm, pc in (launches if r % 2 else launches[::-1])
        if only_arm in (None, arm)
    )
    sampling = bench.sampling
    return Protocol(
        name=bench.name,
        arms=arms,
        baseline=bench.baseline,
        concurrencies=concurrencies,
        sampling=Sampling(temperature=sampling.temperature, top_p=sampling.top_p,
                          max_output_tokens=sampling.max_output_tokens,
                          ignore_eos=sampling.ignore_eos),
        cells=cells,
        phase_timeout_s=bench.phase_timeout_s,
        metrics_timeout_s=bench.metrics_timeout_s,
        repeats=repeats,
        equivalence_margin=bench.equivalence_margin,
        lossless=lossless_spec(bench.lossless, arms),
        warm_caches=bench.warm_caches,
        objectives=objectives(bench.objectives),
        prefix_caching=caching,
    )


def prefix_caching_axis(values: Sequence[bool]) -> tuple[bool, ...]:
    """`bench.prefix_caching` ([on] by default: the launch as configured, no extra cell;
    [on, off]: every arm twice), in order."""
    if not values:
        raise UsageError("bench.prefix_caching is empty: it needs on, off or both.",
                         hint="bench.prefix_caching=[on] (the default) or [on,off].")
    _unique(list(values), "bench.prefix_caching")
    return tuple(values)


def check_max_num_seqs(max_num_seqs: int | None, cell: Cell) -> None:
    """A server that holds fewer sequences than the cell's concurrency would queue, not batch."""
    effective = VLLM_DEFAULT_MAX_NUM_SEQS if max_num_seqs is None else max_num_seqs
    needed = max(p.concurrency for p in cell.phases)
    if effective < needed:
        source = "vLLM's default" if max_num_seqs is None else "serving.args.max_num_seqs"
        raise UsageError(
            f"Cell {cell.id} runs up to {needed} concurrent requests but the server holds at "
            f"most {effective} sequences ({source}).",
            hint=f"Set serving.args.max_num_seqs={needed} or higher, or drop concurrency "
            f"{needed} from bench.concurrencies.",
        )
