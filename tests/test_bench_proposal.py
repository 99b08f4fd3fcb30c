"""The configuration proposed from the winners per load: a K schedule where the arms differ
only in their draft count and the installed vLLM has `num_speculative_tokens_per_batch_size`,
else the arm per load range; its `dspark serve` command passes the real dry-run preflight
(vLLM's own parser included), and `bench.profiles` makes it one more arm."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from dspark_cli.bench import proposal, proposal_files, winners
from dspark_cli.bench.arms import arm_config
from dspark_cli.bench.proposal_files import this_launch
from dspark_cli.config import bench as bench_schema
from dspark_cli.paths import conf_dir
from dspark_cli.vllm.options import has_field
from tests.conftest import compose_typed, run_dspark


def profile(arm: str) -> dict:
    return yaml.safe_load((conf_dir() / "speculative" / f"{arm}.yaml").read_text())


def w(c: int, arm: str | None) -> winners.Winner:
    return winners.Winner(c, arm, winners.THROUGHPUT, arm, None, "")


CROSSOVER = [w(2, "draft_model"), w(8, "none")]
PROFILES = {a: profile(a) for a in ("none", "draft_model", "dspark_fixed", "dspark_adaptive")}


@pytest.mark.vllm  # reads the installed vLLM's source
def test_the_installed_vllm_has_the_schedule_and_a_made_up_key_is_not() -> None:
    assert has_field(proposal.SCHEDULE_KEY)
    assert has_field("num_speculative_tokens")
    assert not has_field("num_speculative_tokens_per_moon_phase")


@pytest.mark.vllm  # `dspark serve --dry-run --validate` asks the installed vLLM
def test_a_crossover_of_draft_counts_is_a_schedule(tmp_path: Path) -> None:
    found = proposal.propose(CROSSOVER, PROFILES, True, ["+hw=cpu"], tmp_path,
                             ["none", "draft_model"])
    assert found.kind == "schedule"
    assert found.schedule == ((1, 2, 3), (3, 8, 0))
    (cmd,) = found.commands
    assert shlex.split(cmd) == ["dspark", "serve", "+hw=cpu", "speculative=draft_model",
                                "++speculative.extra.num_speculative_tokens_per_batch_size="
                                "[[1,2,3],[3,8,0]]", "--dry-run", "--validate"]
    assert "bench.arms=[none,draft_model,proposed]" in found.validate_command
    proposal.write(found, tmp_path)
    data = json.loads((tmp_path / proposal.PROPOSAL_JSON).read_text())
    assert data["statement"].startswith("A proposal to validate")
    written = tmp_path / "proposal" / "speculative" / "proposed.yaml"
    assert yaml.safe_load(written.read_text())["extra"][proposal.SCHEDULE_KEY] == \
        [[1, 2, 3], [3, 8, 0]]
    # `dspark validate` runs it as one more arm: bench.profiles finds the profile.
    bench_schema.register()
    cfg = compose_typed(["+hw=cpu", f"bench.profiles={tmp_path / 'proposal'}"],
                         config="bench")
    arm = arm_config(cfg, "proposed")
    assert arm.speculative.extra[proposal.SCHEDULE_KEY] == [[1, 2, 3], [3, 8, 0]]
    # The proposal passes the same preflight as any `dspark serve --dry-run --validate`
    # (--json: the same run, machine-readable), vLLM's own parser included.
    done = run_dspark(*shlex.split(cmd)[1:], "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    plan = json.loads(done.stdout)
    assert "num_speculative_tokens_per_batch_size" in " ".join(plan["argv"])
    (verdict,) = [f for f in plan["preflight"] if f["rule"] == "vllm-accepts-command"]
    assert verdict["status"] == "passed", verdict


def test_without_the_schedule_or_across_drafters_it_is_the_arm_per_load(tmp_path: Path) -> None:
    found = proposal.propose(CROSSOVER, PROFILES, False, [], tmp_path, ["none", "draft_model"])
    assert found.kind == "per_load" and "has no num_speculative_tokens" in found.note
    assert found.ranges == ((1, 2, "draft_model"), (3, 8, "none"))
    adaptive = [w(4, "dspark_fixed"), w(32, None), w(128, "dspark_adaptive")]
    found = proposal.propose(adaptive, PROFILES, True, [], tmp_path,
                             ["dspark_fixed", "dspark_adaptive"])
    assert found.kind == "per_load" and "differ in more than their draft count" in found.note
    assert "load 32 without a clear winner" not in found.note  # w(): nothing kept
    assert [shlex.split(c)[2] for c in found.commands] == ["speculative=dspark_fixed",
                                                          "speculative=dspark_adaptive"]
    assert proposal.propose([w(2, None)], PROFILES, True, [], tmp_path, ["none"]).kind == "none"


def test_a_runs_overrides_file_is_never_read_back(tmp_path: Path) -> None:
    """The launch overrides are this process's own (Hydra's record of its command line), never
    the run's `.hydra/overrides.yaml` or its parent's: outside a Hydra job there are none."""
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(
        ["bench=cpu", "+hw=cpu", "+hw.env.PYTHONPATH=/planted"]))
    bench_schema.register()
    launch = this_launch(compose_typed(["+hw=cpu"], config="bench"))
    assert launch.overrides == () and launch.profiles_dir is None


# -- a proposal never contradicts its numbers -----------------------------------------------------
def test_a_load_without_a_clear_winner_keeps_the_baseline_never_an_arm_measured_slower(
        tmp_path: Path) -> None:
    """At 8 draft_model is measured at 0.5x and none is not clearly faster than ngram: the load
    has no clear winner. Draft_model wins 2 and 32 on either side, yet 8 is not merged into its
    range: it keeps the baseline (none), and the note says so."""
    from dspark_cli.bench import stats

    measured = [("none", 2, [50.0, 51.0, 49.0]), ("draft_model", 2, [100.0, 101.0, 99.0]),
                ("ngram", 2, [60.0, 61.0, 59.0]),
                ("none", 8, [100.0, 101.0, 99.0]), ("draft_model", 8, [50.0, 51.0, 49.0]),
                ("ngram", 8, [99.5, 100.5, 98.5]),
                ("none", 32, [50.0, 51.0, 49.0]), ("draft_model", 32, [100.0, 101.0, 99.0]),
                ("ngram", 32, [60.0, 61.0, 59.0])]
    found = winners.pick(measured, [2, 8, 32], 0.05, winners.THROUGHPUT, baseline="none")
    assert [(w.arm, w.kept) for w in found] == [("draft_model", None), (None, "none"),
                                                ("draft_model", None)]
    assert winners.ranges(found) == [(1, 2, "draft_model"), (3, 8, "none"),
                                     (9, 32, "draft_model")]
    # Every load is routed to an arm no interval calls slower than another arm there.
    for w in found:
        mine = next(v for a, c, v in measured if (a, c) == (w.routed, w.concurrency))
        for arm, c, values in measured:
            if c == w.concurrency and arm != w.routed:
                s = stats.speedup(str(w.routed), mine, arm, values, c, 0.05)
                assert s.verdict is not stats.Verdict.SLOWER, (w, arm)
    arms = ["none", "draft_model", "ngram"]
    made = proposal.propose(found, {a: PROFILES.get(a) or profile(a) for a in arms}, False,
                            ["+hw=cpu"], tmp_path, arms)
    assert made.kind == "per_load" and list(made.ranges) == winners.ranges(found)
    assert "load 8 without a clear winner keeps none (the best measured there" in made.note
    # The baseline measured slower there than another arm: the best arm is kept instead.
    slower = [("none", 4, [50.0, 51.0, 49.0]), ("draft_model", 4, [100.0, 101.0, 99.0]),
              ("ngram", 4, [99.5, 100.5, 98.5])]
    (w4,) = winners.pick(slower, [4], 0.05, winners.THROUGHPUT, baseline="none")
    assert (w4.arm, w4.kept, w4.routed) == (None, "draft_model", "draft_model")


@pytest.mark.parametrize("kind", ["per_load", "schedule"])
def test_when_the_proposal_wins_the_next_proposal_composes(tmp_path: Path, kind: str) -> None:
    """A validation of the proposal ran it as the arm `proposed` (from bench.profiles) and it
    won: the next proposal names a fresh arm, carries `proposed`'s profile beside its own, and
    its `dspark serve` command composes through Hydra (the profile on Hydra's search path,
    the schedule forced over the one the profile holds) into a plan."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()  # run directories: the bench made them
    found = proposal.propose(CROSSOVER, PROFILES, True, ["+hw=cpu"], first,
                             ["none", "draft_model"])
    proposal.write(found, first)
    launch = proposal_files.Launch(("+hw=cpu",), first / "proposal")
    arms = ("none", "draft_model", "proposed")
    profiles, foreign = proposal_files.own_profiles(arms, launch)
    assert list(foreign) == ["proposed"]
    again = [w(2, "proposed"), w(8, "none")] if kind == "schedule" else \
        [w(2, "proposed"), w(8, "proposed")]
    made = proposal.propose(again, profiles, True, ["+hw=cpu"], second, arms,
                            {"proposed": second / "proposal"})
    assert made.kind == kind and made.name == "proposed_2"
    if kind == "schedule":
        assert "bench.arms=[none,draft_model,proposed,proposed_2]" in made.validate_command
    proposal.write(made, second, foreign)
    assert (second / "proposal" / "speculative" / "proposed.yaml").is_file()
    (cmd,) = made.commands
    args = [a for a in shlex.split(cmd)[2:] if a != "--validate"]
    done = run_dspark("serve", *args, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    plan = json.loads(done.stdout)
    spec = json.loads(plan["argv"][plan["argv"].index("--speculative-config") + 1])
    assert spec["method"] == "draft_model"
    if kind == "schedule":
        assert spec[proposal.SCHEDULE_KEY] == [[1, 2, 3], [3, 8, 0]]
    # The validation of the next proposal finds every arm it names.
    bench_schema.register()
    cfg = compose_typed(["+hw=cpu", f"bench.profiles={second / 'proposal'}"], config="bench")
    for arm in ("proposed", *(("proposed_2",) if kind == "schedule" else ())):
        assert arm_config(cfg, arm).speculative.method == "draft_model"


def validation_run(run: Path, first: Path, values: dict[str, float]) -> None:
    """A validation of `first`'s proposal as the live bench leaves it: arms none, draft_model
    and proposed (from bench.profiles), three repeats at loads 2 and 8 measured at `values`
    (tokens/s), every cell.json, and the profiles from outside the config group carried into
    its proposal/ folder."""
    import random

    from dspark_cli.bench.protocol import Protocol
    from tests.report_factory import cell_record

    arms = ("none", "draft_model", "proposed")
    info = Protocol("cpu", arms, "none", (8, 2), 3, 0.05)
    rng = random.Random(0)
    for c in info.concurrencies:
        for arm in arms:
            for repeat in (1, 2, 3):
                value = round(values[arm] * c * rng.uniform(0.99, 1.01), 3)
                record = cell_record(arm, c, repeat, value, info, "5" * 64)
                path = run / "cells" / record.cell_id / "cell.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(record.to_dict()))
    launch = proposal_files.Launch(("+hw=cpu",), first / "proposal")
    _, foreign = proposal_files.own_profiles(arms, launch)
    assert list(foreign) == ["proposed"]
    proposal.write(proposal.propose([w(2, "none")], PROFILES, False, [], run, arms), run, foreign)


def test_a_report_of_a_validation_the_proposal_won_prints_commands_that_compose(
        tmp_path: Path) -> None:
    """`bench --report` of a validation run where the validated `proposed` arm won every load
    (no launch of its own: nothing read back as config): each `dspark serve` command the
    proposal prints composes and passes its dry run as printed, `proposed` served from the
    run's own proposal/ folder (the profile the bench carried there)."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    proposal.write(proposal.propose(CROSSOVER, PROFILES, True, ["+hw=cpu"], first,
                                    ["none", "draft_model"]), first)
    validation_run(second, first, {"none": 50.0, "draft_model": 60.0, "proposed": 100.0})
    done = run_dspark("bench", "--report", str(second), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads((second / proposal.PROPOSAL_JSON).read_text())
    assert found["kind"] == "per_load" and [r["arm"] for r in found["ranges"]] == ["proposed"]
    printed = [*found["commands"], *([found["validate_command"]]
                                     if found["validate_command"] else [])]
    assert printed and all("speculative=proposed" in c for c in found["commands"])
    for cmd in printed:
        argv = shlex.split(cmd)
        assert argv[:2] in (["dspark", "serve"], ["dspark", "validate"]) and "--dry-run" in argv
        # `--validate` asks the installed vLLM (the slow lane's); the rest runs as printed.
        ran = run_dspark(*[a for a in argv[1:] if a != "--validate"], "--json", cwd=tmp_path)
        assert ran.returncode == 0, cmd + "\n" + ran.stderr[-2000:]
        plan = json.loads(ran.stdout)
        spec = json.loads(plan["argv"][plan["argv"].index("--speculative-config") + 1])
        assert spec["method"] == "draft_model", cmd


def test_an_arm_whose_profile_is_nowhere_gets_no_command(tmp_path: Path) -> None:
    """A winner whose profile is neither dspark's nor carried into the run: no command that
    could not compose is printed; the note says how to serve it."""
    made = proposal.propose([w(2, "mystery"), w(8, "none")], PROFILES, False, [], tmp_path,
                            ["none", "mystery"])
    assert [shlex.split(c)[2] for c in made.commands] == ["speculative=none"]
    assert "mystery is no profile of dspark's config" in made.note
    assert "no command is printed for it" in made.note
