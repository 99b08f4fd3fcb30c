"""The run record: its notes come from the findings' fields, never from their message text;
config.yaml holds no secret."""

from __future__ import annotations

from pathlib import Path

from dspark_cli.config.typed import plain
from dspark_cli.deploy.start import record_notes
from dspark_cli.launch.plan import build_plan
from dspark_cli.launch.record import write_config, write_record
from dspark_cli.launch.secrets import REDACTED, learn
from dspark_cli.paths import CONFIG_YAML
from dspark_cli.status import Finding, Status
from tests.conftest import compose_typed


def record(tmp_path: Path, *findings: Finding, custom: bool = False) -> str:
    cfg = compose_typed(["+hw=cpu", "model.path=/nonexistent/model"])
    plan = build_plan(cfg)
    write_record(tmp_path, cfg, plan, list(plan.argv), {},
                 record_notes(plan.argv, custom, findings))
    return (tmp_path / "launch.sh").read_text()


def test_an_overridden_finding_is_noted_whatever_its_message(tmp_path: Path) -> None:
    script = record(tmp_path, Finding("checkpoint-confidence-head", Status.skipped,
                                      "head not verified, launched on purpose", "checks.x",
                                      overridden=True))
    assert "# NOTE: checkpoint-confidence-head: head not verified" in script


def test_a_message_that_merely_says_overridden_is_not_a_note(tmp_path: Path) -> None:
    script = record(tmp_path, Finding("some-rule", Status.passed, "OVERRIDDEN lookalike"))
    assert "# NOTE" not in script


def test_a_replaced_command_is_noted(tmp_path: Path) -> None:
    assert "# NOTE: server.command replaces the planned argv" in record(tmp_path, custom=True)


def test_config_yaml_is_redacted_and_scrubbed_whoever_writes_it(tmp_path: Path) -> None:
    """A secret's value also typed under a key that is no secret's is scrubbed there too."""
    value = "s3cret-token-value"
    cfg = compose_typed(["+hw=cpu", f"+serving.env.HF_TOKEN={value}",
                          f"+serving.extra_args.revision={value}"])
    learn(plain(cfg))
    write_config(tmp_path, cfg)
    text = (tmp_path / CONFIG_YAML).read_text()
    assert value not in text
    assert text.count(REDACTED) == 2
