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

from dspark_cli.bench import proposal, winners
from dspark_cli.bench import schema as bench_schema
from dspark_cli.bench.arms import arm_config
from dspark_cli.bench.proposal_files import this_launch
from dspark_cli.paths import conf_dir
from dspark_cli.vllm.speculative_fields import has_field
from tests.conftest import compose_config, run_dspark


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
    cfg = compose_config(["+hw=cpu", f"bench.profiles={tmp_path / 'proposal'}"],
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
    launch = this_launch(compose_config(["+hw=cpu"], config="bench"))
    assert launch.overrides == () and launch.profiles_dir is None
