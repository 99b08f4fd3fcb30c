"""vLLM's verdicts asked together: a bench's arms are judged in one vLLM import
(`deploy/start.ask_vllm_together`), taken when the first arm's verdict is needed (after its
preflight, its model there), and a command already judged in this command (the smoke's, then
the same arm's in the bench: the answers the command holds, `accepts.Verdicts`, passed to each
start) is not judged again. The real installed vLLM's parser; the count of
its subprocesses is read from a spy that runs the real `subprocess.run`."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from dspark_cli.deploy.start import ask_vllm_together, ensure_model
from dspark_cli.launch.checks import node_verdicts
from dspark_cli.launch.plan import build_plan
from dspark_cli.vllm import accepts
from tests.conftest import compose_typed

pytestmark = pytest.mark.vllm


@pytest.fixture
def validator_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The argvs of every validator subprocess, each still run for real."""
    runs: list[Any] = []
    real = subprocess.run

    def spy(argv: Any, *args: Any, **kwargs: Any) -> Any:
        if "dspark_cli.vllm.accepts" in argv:
            runs.append(kwargs["input"])
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(accepts.subprocess, "run", spy)
    yield runs


def test_arms_are_judged_in_one_import_and_each_verdict_is_kept(validator_runs,
                                                                tmp_path) -> None:
    """Three arms and one whose model is not there are asked in one import; an answer given
    without the model's config (vLLM could not build the engine config) is not kept, so that
    arm is asked again (once its model is made, `ready()` gets the whole check)."""
    arms = [compose_typed(["+hw=cpu", "speculative=none", "server.port=9301"]),
            compose_typed(["+hw=cpu", "speculative=draft_model", "server.port=9301"]),
            compose_typed(["+hw=cpu", "speculative=draft_model", "server.port=9301",
                            "+speculative.extra.no_such_key=1"]),
            # the tiny model's environment (HF_HUB_OFFLINE), so it is asked in the same import
            compose_typed(["+hw=cpu", "model=local", f"model.path={tmp_path / 'model'}",
                            "server.port=9301", "+hw.env.HF_HUB_OFFLINE='1'"])]
    plans = [build_plan(cfg) for cfg in arms]
    assert len({tuple(sorted(plan.env_map.items())) for plan in plans}) == 1
    asked = accepts.Verdicts()  # what the bench command holds and passes to each arm
    ask_vllm_together(list(zip(arms, plans, strict=True)), asked)
    assert validator_runs == []  # nothing is asked before a verdict is needed
    ensure_model(arms[0])  # a local config.json: vLLM builds the engine config too
    verdicts = [node_verdicts(plan, 300.0, asked) for plan in plans[:3]]
    # the first arm's question took the others along; each verdict was then already there
    assert len(validator_runs) == 1 and validator_runs[0].count("--port") == 4
    assert [v[0].status.value for v in verdicts] == ["passed", "passed", "failed"]
    assert "no_such_key" in verdicts[2][0].message
    (unchecked,) = node_verdicts(plans[3], 300.0, asked)
    assert "engine config not checked" in unchecked.message and unchecked.status.value == "passed"
    assert len(validator_runs) == 2 and validator_runs[1].count("--port") == 1
    # A command of one's own is not vLLM's to judge: nothing is asked for it.
    custom = compose_typed(["+hw=cpu", "server.port=9302", "server.command=[sleep,1]"])
    ask_vllm_together([(custom, build_plan(custom))], asked)
    assert asked.along == {} and len(validator_runs) == 2
    # Without the command's answers, a verdict is asked afresh.
    node_verdicts(plans[0], 300.0)
    assert len(validator_runs) == 3


def test_validates_smoke_question_takes_the_bench_arms_along(validator_runs) -> None:
    """`dspark validate` asks vLLM once for its smoke and its bench: before the smoke, each
    arm's command waits for the smoke's question in the same environment (how a waiting
    command is asked along is the test above). A bench that does not plan is left for its
    stage to report, with nothing asked ahead. Nothing here imports vLLM."""
    from dspark_cli.bench.workflow import ask_vllm_ahead, compose_arms, protocol_of
    from dspark_cli.config import validate as schema

    schema.register()
    cfg = compose_typed(["+hw=cpu", "bench=cpu", "server.port=9303"], config="validate")
    asked = accepts.Verdicts()
    ask_vllm_ahead(cfg, asked)
    arms = compose_arms(cfg, protocol_of(cfg)[0])
    assert sorted(arms) == ["draft_model", "none"]
    smoke_env = tuple(sorted(build_plan(cfg).env_map.items()))
    assert asked.along == {smoke_env: [tuple(arm.plan.argv) for arm in arms.values()]}
    nothing = accepts.Verdicts()
    ask_vllm_ahead(compose_typed(["+hw=cpu", "bench=cpu", "bench.arms=[none,nope]"],
                                  config="validate"), nothing)
    assert nothing.along == {} and validator_runs == []
