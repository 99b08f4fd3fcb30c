"""The compose cache returns the same config, keys on everything, and survives corruption."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dspark_cli.config.cache import cache_dir, cached_compose, compose_key
from tests.conftest import compose_config


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPARK_CACHE_DIR", str(tmp_path))


def test_second_compose_comes_from_the_cache_and_is_equal() -> None:
    calls = []

    def compose():
        calls.append(1)
        return compose_config(["+hw=mi350x"])

    first = cached_compose("serve", ["+hw=mi350x"], compose)
    second = cached_compose("serve", ["+hw=mi350x"], compose)
    assert len(calls) == 1
    assert OmegaConf.to_yaml(first) == OmegaConf.to_yaml(second)
    assert OmegaConf.get_type(second.hw).__name__ == "HardwareConf"


def test_key_depends_on_config_and_overrides() -> None:
    keys = {compose_key("serve", ["+hw=mi350x"]), compose_key("serve", ["+hw=h200"]),
            compose_key("smoke", ["+hw=mi350x"])}
    assert len(keys) == 3


def test_a_corrupt_entry_is_composed_again() -> None:
    cached_compose("serve", ["+hw=cpu"], lambda: compose_config(["+hw=cpu"]))
    (entry,) = cache_dir().glob("*.pkl")
    entry.write_bytes(b"not a pickle")
    cfg = cached_compose("serve", ["+hw=cpu"], lambda: compose_config(["+hw=cpu"]))
    assert cfg.hw.name == "cpu"
