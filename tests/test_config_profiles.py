"""The config tree itself: every profile composes, and the rendered deployments stay exactly
what they were (golden files in tests/data/golden/, written from the config before the hw
profiles shared their bases).

Regenerate the goldens only for an intended change of a rendered deployment:
    .venv/bin/python -m tests.test_config_profiles --write-goldens
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dspark_cli.launch.plan import build_plan
from dspark_cli.launch.render import plan_dict, shell_script
from tests.conftest import compose_config

GOLDEN = Path(__file__).parent / "data" / "golden"
HW_PROFILES = ("mi350x", "mi355x", "mi300x", "h200", "b200", "cpu")
# The cpu profile's tiny model lives under DSPARK_CACHE_DIR: pinned for the goldens.
GOLDEN_CACHE_DIR = "/golden-cache"
VARIANTS = {
    "default": [],
    "speculative=dspark_fixed": ["speculative=dspark_fixed"],
    "speculative=none": ["speculative=none"],
    "compilation=eager": ["compilation=eager"],
    "serving.args.max_num_seqs=512": ["serving.args.max_num_seqs=512"],
}


def rendering(profile: str, overrides: list[str]) -> dict[str, object]:
    """What `dspark serve +hw=<profile> <overrides>` renders: the `--dry-run` script, the
    `--json` plan (less its preflight findings, which belong to the rules, not the config),
    and the resolved hw and model groups (what `--cfg job --resolve` prints for them)."""
    cfg = compose_config([f"+hw={profile}", *overrides])
    plan = build_plan(cfg)
    return {
        "script": shell_script(plan),
        "plan": plan_dict(plan),
        "config": OmegaConf.to_container(OmegaConf.masked_copy(cfg, ["hw", "model"]),
                                         resolve=True, enum_to_str=True),
    }


def golden_renderings(profile: str) -> dict[str, dict[str, object]]:
    return {name: rendering(profile, overrides) for name, overrides in VARIANTS.items()}


@pytest.mark.parametrize("profile", HW_PROFILES)
def test_rendered_deployment_matches_its_golden(profile: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPARK_CACHE_DIR", GOLDEN_CACHE_DIR)
    actual = golden_renderings(profile)
    assert actual["default"]["script"] == (GOLDEN / f"{profile}.sh").read_text()
    assert actual == json.loads((GOLDEN / f"{profile}.json").read_text())


def write_goldens() -> None:
    os.environ["DSPARK_CACHE_DIR"] = GOLDEN_CACHE_DIR
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for profile in HW_PROFILES:
        renderings = golden_renderings(profile)
        (GOLDEN / f"{profile}.sh").write_text(renderings["default"]["script"])
        (GOLDEN / f"{profile}.json").write_text(json.dumps(renderings, indent=2) + "\n")


if __name__ == "__main__" and sys.argv[1:] == ["--write-goldens"]:
    write_goldens()
