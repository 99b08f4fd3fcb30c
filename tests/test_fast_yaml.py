"""The libyaml loader used while composing reads every YAML file exactly as OmegaConf's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from dspark_cli.config.fast_yaml import libyaml
from dspark_cli.paths import conf_dir

TRICKY = """\
when: 2024-01-01
float_exp: 1e3
float_dot: 1.5
int: 7
sexagesimal: 1:30
inf: .inf
text: 'yes'
flag: true
nothing: null
path: !!python/object/apply:pathlib.Path ["/a", "b"]
"""


def test_every_conf_file_and_tricky_scalars_load_the_same(tmp_path: Path) -> None:
    tricky = tmp_path / "tricky.yaml"
    tricky.write_text(TRICKY)
    files = [*sorted(conf_dir().rglob("*.yaml")), tricky]
    plain = [OmegaConf.to_container(OmegaConf.load(f)) for f in files]
    with libyaml():
        fast = [OmegaConf.to_container(OmegaConf.load(f)) for f in files]
    assert fast == plain
    assert plain[-1]["when"] == "2024-01-01" and plain[-1]["float_exp"] == 1000.0


def test_a_duplicate_key_is_still_refused(tmp_path: Path) -> None:
    dup = tmp_path / "dup.yaml"
    dup.write_text("a: 1\na: 2\n")
    with libyaml(), pytest.raises(yaml.constructor.ConstructorError, match="duplicate key a"):
        OmegaConf.load(dup)


def test_the_loader_is_restored_after_the_block() -> None:
    from omegaconf import _utils

    before = _utils.get_yaml_loader
    with libyaml():
        assert _utils.get_yaml_loader is not before
    assert _utils.get_yaml_loader is before
