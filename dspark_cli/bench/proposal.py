"""The configuration that follows the crossover, proposed from the winners per load (pure but
for `write`). Where the winning arms differ only in their draft count (no speculation counts
as K=0) and the installed vLLM has `num_speculative_tokens_per_batch_size`, one server with a
K per batch-size range; otherwise the arm to launch per load range. Either way a proposal to
validate: between two measured concurrencies the crossover is a guess, and a schedule is a new
configuration no cell has measured. A winner with prefix caching off (`<arm>+pc-off`) is still
named by its arm, `speculative=<arm>`, with `serving.args.enable_prefix_caching=false` beside.

The decision drawn: its tables for the terminal (`tables`: goodput under the protocol's latency
objectives, with intervals over repeats, and the arm to run at each concurrency) and the
pictures it is read from (`plot`: throughput and goodput against concurrency per arm with their
95% intervals as bands, decisions.png; the Pareto view, per-user output tokens/s against total
output tokens/s, one line per arm, pareto.png).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dspark_cli.bench import stats, winners
from dspark_cli.bench.protocol import on_off, split_variant
from dspark_cli.bench.stats import Interval
from dspark_cli.bench.summary import ArmResult, Summary
from dspark_cli.console import json_text
from dspark_cli.paths import DECISIONS_PNG, PARETO_PNG, PROPOSAL_JSON
from dspark_cli.paths import PROPOSAL_DIR as PROFILES_DIR
from dspark_cli.untrusted import png_bytes, write_atomic

if TYPE_CHECKING:
    from rich.console import RenderableType

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
PROPOSED = "proposed"
STATEMENT = ("A proposal to validate, not a measured result: run it as one more arm "
             "(validate_command) before serving it.")
# Settings of a profile that say what it is rather than how it drafts.
_NOT_DRAFTING = ("name", "num_speculative_tokens", "expect_log", "draft_tokens_rule")


@dataclass(frozen=True)
class Proposal:
    kind: str  # "schedule", "per_load" or "none"
    ranges: tuple[tuple[int, int, str], ...]  # (first load, last load, arm), inclusive
    schedule: tuple[tuple[int, int, int], ...] = ()  # vLLM's (start, end, K) when "schedule"
    profile: Mapping[str, Any] | None = None  # the speculative profile a schedule is
    commands: tuple[str, ...] = ()  # `dspark serve ... --dry-run --validate`, shell-quoted
    validate_command: str = ""
    note: str = ""
    name: str = PROPOSED  # the proposal's arm (`proposed`, numbered past the run's own arms)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "statement": STATEMENT if self.kind != "none" else "",
                "ranges": [_range(a, b, arm) for a, b, arm in self.ranges],
                "schedule": [list(s) for s in self.schedule], "profile": self.profile,
                "commands": list(self.commands), "validate_command": self.validate_command,
                "note": self.note, "name": self.name}


def _range(first: int, last: int, name: str) -> dict[str, Any]:
    """A load range of proposal.json: its arm by its config option's name, and
    `prefix_caching: false` where that arm won with prefix caching off."""
    arm, caching = split_variant(name)
    return {"first": first, "last": last, "arm": arm,
            **({} if caching else {"prefix_caching": False})}


def _k(profile: Mapping[str, Any]) -> int:
    return int(profile.get("num_speculative_tokens") or 0) if profile.get("method") else 0


def _drafting(profile: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in profile.items() if k not in _NOT_DRAFTING}


def schedulable(arms: Sequence[str], profiles: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The arm whose drafter a K schedule would run (the largest K), or None when the arms
    differ in more than their draft count (or prefix caching, or none drafts, or one's profile
    is unknown)."""
    if any(a not in profiles for a in arms) or len({split_variant(a)[1] for a in arms}) > 1:
        return None
    drafting = [a for a in arms if profiles[a].get("method")]
    if not drafting or len({json.dumps(_drafting(profiles[a]), sort_keys=True, default=str)
                            for a in drafting}) != 1:
        return None
    return max(drafting, key=lambda a: _k(profiles[a]))


def _serve(base: Sequence[str], extra: Sequence[str]) -> str:
    return shlex.join(["dspark", "serve", *base, *extra, "--dry-run", "--validate"])


def _arm(name: str, foreign: Mapping[str, Path]) -> list[str]:
    """The overrides that make `name` (an arm, or `<arm>+pc-off`) the served launch: a profile
    outside dspark's config group (a proposal's) is found through Hydra's search path."""
    arm, caching = split_variant(name)
    off = [] if caching else ["serving.args.enable_prefix_caching=false"]
    if arm in foreign:
        return [f"hydra.searchpath=[file://{foreign[arm]}]", f"speculative={arm}", *off]
    return [f"speculative={arm}", *off]


def _name(arms: Sequence[str]) -> str:
    """The proposal's arm: `proposed`, numbered when the run already has one (a proposal that
    won its own validation proposes again)."""
    n = 1
    while (name := PROPOSED if n == 1 else f"{PROPOSED}_{n}") in arms:
        n += 1
    return name


def _gaps(found: Sequence[winners.Winner]) -> str:
    """What the loads without a clear winner are served with, and why."""
    kept: dict[tuple[str, str], list[int]] = {}
    for w in found:
        if w.arm is None and w.kept is not None:
            why = ("the best measured there, though not clearly faster" if w.kept == w.best
                   else "the baseline: no arm is measured clearly faster than it there")
            kept.setdefault((w.kept, why), []).append(w.concurrency)
    return "".join(f"; {'loads' if len(loads) > 1 else 'load'} "
                   f"{', '.join(map(str, sorted(loads)))} without a clear winner "
                   f"{'keep' if len(loads) > 1 else 'keeps'} {arm} ({why})"
                   for (arm, why), loads in kept.items())


def propose(found: Sequence[winners.Winner], profiles: Mapping[str, Mapping[str, Any]],
            has_schedule: bool, base_overrides: Sequence[str], run_dir: Path,
            arms: Sequence[str], foreign: Mapping[str, Path] | None = None,
            launch_known: bool = True) -> Proposal:
    """What to serve from `found` (the summary's winners); `profiles` are the arms' speculative
    profiles as dspark's own config holds them (an arm missing is unknown), `foreign` the
    folders of those outside its config group, `base_overrides` the launch overrides of this
    process (model, hardware, serving; `launch_known` False: none known, the caller adds
    them). A load without a clear winner keeps `Winner.kept`, never an arm measured slower."""
    foreign = foreign or {}
    ranges = tuple(winners.ranges(found))
    if not any(w.arm for w in found):
        return Proposal("none", (), note="no load has a clear winner: nothing to propose")
    used = list(dict.fromkeys(arm for _, _, arm in ranges))
    notes = _gaps(found)
    if not launch_known:
        notes += ("; the run's launch overrides (model, hardware, serving) are not read back "
                  "from its records: add yours to each command")
    # An arm whose profile is nowhere dspark can point a command at gets no command: one that
    # cannot compose is no proposal.
    unknown = [a for a in used if a not in profiles and split_variant(a)[0] not in foreign]
    if unknown:
        notes += (f"; {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} no profile "
                  "of dspark's config and none is in the run's proposal/ folder: no command "
                  "is printed for it; serve it with hydra.searchpath=[file://DIR], DIR holding "
                  "speculative/<arm>.yaml")
    name = _name(arms)
    options = list(dict.fromkeys(split_variant(a)[0] for a in arms))
    caching = list(dict.fromkeys(split_variant(a)[1] for a in arms))
    validate = shlex.join(["dspark", "validate", *base_overrides,
                           f"bench.arms=[{','.join([*options, name])}]",
                           *([] if caching == [True] else
                             [f"bench.prefix_caching=[{','.join(map(on_off, caching))}]"]),
                           f"bench.profiles={run_dir / PROFILES_DIR}"])
    base = schedulable(used, profiles) if len(used) > 1 else None
    if base is not None and has_schedule:
        schedule = tuple((a, b, _k(profiles[arm])) for a, b, arm in ranges)
        value = "[" + ",".join(f"[{a},{b},{k}]" for a, b, k in schedule) + "]"
        profile = {**profiles[base], "name": name,
                   "extra": {**(profiles[base].get("extra") or {}), SCHEDULE_KEY: schedule}}
        # `++`: the drafter's profile may hold a schedule already (a proposal that won).
        cmd = _serve(base_overrides, [*_arm(base, foreign),
                                      f"++speculative.extra.{SCHEDULE_KEY}={value}"])
        return Proposal("schedule", ranges, schedule, profile, (cmd,), validate,
                        f"one server, K per batch size from {base}'s drafter{notes}", name)
    why = ("one arm serves every load" if len(used) == 1 else
           f"the installed vLLM has no {SCHEDULE_KEY}" if base is not None else
           "the arms differ in more than their draft count")
    cmds = tuple(_serve(base_overrides, _arm(arm, foreign)) for arm in used
                 if arm not in unknown)
    return Proposal("per_load", ranges, (), None, cmds, "",
                    f"the arm per load range ({why}); route each range to its own server"
                    f"{notes}", name)


def write(proposal: Proposal, directory: Path,
          carried: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    """proposal.json, and the proposed profile as `proposal/speculative/<name>.yaml` (what
    `bench.profiles` makes an arm) beside `carried`: the profiles of the run's own arms from
    outside dspark's config, so the next validation finds them too. Written atomically,
    never through a link."""
    folder = directory / PROFILES_DIR / "speculative"
    profiles = {**(carried or {}), **({proposal.name: proposal.profile}
                                     if proposal.profile is not None else {})}
    for arm, profile in profiles.items():
        plain = json.loads(json.dumps(profile, default=list))
        write_atomic(folder / f"{arm}.yaml", (f"# {STATEMENT}\n" if arm == proposal.name
                                              else "") + yaml.safe_dump(plain, sort_keys=False),
                     directory)
    return write_atomic(directory / PROPOSAL_JSON, json_text(proposal.to_dict()), directory)


def interval(iv: stats.Interval | None, fmt: str, scale: float = 1.0, unit: str = "") -> str:
    """"12.3 [10.1, 14.5]"; just the estimate when unbounded; "-" when absent."""
    if iv is None:
        return "-"
    point = format(iv.estimate * scale, fmt) + unit
    if iv.low is None or iv.high is None:
        return point
    return f"{point} [{format(iv.low * scale, fmt)}, {format(iv.high * scale, fmt)}]"


def winner_reason(summary: Summary, concurrency: int) -> tuple[str, str]:
    """(arm or "no clear winner", the verdict behind it) at one concurrency."""
    w = next((w for w in summary.winners if w.concurrency == concurrency), None)
    if w is None:
        return "no clear winner", "not measured"
    if w.arm is None:
        return "no clear winner", w.note + (f"; a proposal keeps {w.kept} here" if w.kept
                                            else "")
    s = w.runner_up
    why = "over every other arm" if s is None else \
        f"{stats.words(s)} than {s.baseline} ({interval(s.ratio, '.3f', unit='x')})"
    return w.arm, why


def tables(summary: Summary) -> list[RenderableType]:
    """Goodput per arm and concurrency (when the protocol names objectives), then the winner
    per concurrency."""
    from rich.table import Table

    out: list[RenderableType] = []
    pct = f"{stats.CONFIDENCE:.0%}"
    if summary.objectives is not None:
        t = Table(title=f"goodput: {summary.objectives.words()}")
        for name in ("concurrency", "arm", f"output goodput tok/s [{pct}]",
                     f"good requests [{pct}]", "met"):
            t.add_column(name, justify="left" if name in ("arm", "met") else "right")
        for r in summary.results:
            g = r.goodput
            t.add_row(str(r.concurrency), r.arm,
                      interval(g.output_goodput if g else None, ".1f"),
                      interval(g.share if g else None, ".0f", 100, "%"),
                      "-" if g is None else f"{g.met} of {len(g.values)}")
        out.append(t)
    if summary.winners:
        metric = summary.winners[0].metric
        t = Table(title=f"the arm to run (best {metric}, only where the verdict says faster)")
        for name in ("concurrency", "run", "why"):
            t.add_column(name, justify="right" if name == "concurrency" else "left")
        for w in summary.winners:
            arm, why = winner_reason(summary, w.concurrency)
            t.add_row(str(w.concurrency), arm, why)
        out.append(t)
    return out


def _band(ax, xs: list[int], ivs: list[Interval], colour: str, label: str) -> None:
    ax.plot(xs, [iv.estimate for iv in ivs], marker="o", color=colour, label=label)
    lows = [iv.low if iv.low is not None else iv.estimate for iv in ivs]
    highs = [iv.high if iv.high is not None else iv.estimate for iv in ivs]
    ax.fill_between(xs, lows, highs, color=colour, alpha=0.2)


def _mine(summary: Summary, arm: str) -> list[ArmResult]:
    return sorted((r for r in summary.results if r.arm == arm and r.throughput),
                  key=lambda r: r.concurrency)


def plot(summary: Summary, directory: Path) -> tuple[Path, Path]:
    """Write decisions.png and pareto.png into `directory` (Agg: no display needed), each
    replaced atomically: a link planted at either name is replaced, never written through."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False  # names from records are no TeX
    import matplotlib.pyplot as plt

    panels = 2 if summary.objectives else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), constrained_layout=True,
                             squeeze=False)
    colour = {arm: f"C{i}" for i, arm in enumerate(summary.arms)}
    for arm in summary.arms:
        rows = _mine(summary, arm)
        _band(axes[0][0], [r.concurrency for r in rows],
              [r.throughput for r in rows if r.throughput], colour[arm], arm)
        if summary.objectives:
            good = [r for r in rows if r.goodput]
            _band(axes[0][1], [r.concurrency for r in good],
                  [r.goodput.output_goodput for r in good if r.goodput], colour[arm], arm)
    titles = ["output throughput", f"output goodput ({summary.objectives.words()})"
              if summary.objectives else ""]
    winners = {w.concurrency: w.arm for w in summary.winners if w.arm}
    for ax, title in zip(axes[0], titles, strict=False):
        ax.set(title=title, xlabel="concurrency (winner below)", ylabel="output tokens/s",
               xscale="log")
        ax.set_xticks(list(summary.concurrencies),
                      [f"{c}\n{winners.get(c, '-')}" for c in summary.concurrencies])
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.suptitle(f"dspark bench: {summary.protocol} (bands: 95% intervals over repeats)")
    decisions = write_atomic(directory / DECISIONS_PNG, png_bytes(fig, dpi=110))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.5), constrained_layout=True)
    for arm in summary.arms:
        rows = _mine(summary, arm)
        xs = [r.throughput.estimate for r in rows if r.throughput]
        ys = [r.throughput.estimate / r.concurrency for r in rows if r.throughput]
        ax.plot(xs, ys, marker="o", color=colour[arm], label=arm)
        for r, x, y in zip(rows, xs, ys, strict=False):
            ax.annotate(f"c{r.concurrency}", (x, y), textcoords="offset points", xytext=(4, 4),
                        fontsize=8)
    ax.set(title=f"Pareto: {summary.protocol}", xlabel="total output tokens/s",
           ylabel="output tokens/s per user (throughput / concurrency)")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    pareto = write_atomic(directory / PARETO_PNG, png_bytes(fig, dpi=110))
    plt.close(fig)
    return decisions, pareto
