"""The compose cache returns the same typed config, keys on everything, holds only data that
cannot run code, stays bounded, and survives corruption."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf

from dspark_cli.config import cache
from dspark_cli.config.cache import cache_dir, cached_compose, compose_key
from tests.conftest import compose_config, run_dspark


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPARK_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("DSPARK_NO_CACHE", raising=False)


def typed_nodes(node: Any, prefix: str = "") -> dict[str, str]:
    """Every node's dotted key -> its OmegaConf type, or the leaf value's Python type."""
    if not isinstance(node, DictConfig):
        return {prefix: type(node).__name__}
    found = {prefix: str(OmegaConf.get_type(node))}
    for key in node:
        child = node._get_node(key)
        value = child if isinstance(child, DictConfig) else node[key] if not (
            child._is_missing() or child._is_interpolation()) else repr(child._value())
        found.update(typed_nodes(value, f"{prefix}.{key}"))
    return found


@pytest.mark.parametrize("overrides", [["+hw=mi350x"], ["+hw=h200", "speculative=dspark_fixed",
                                                        "+serving.extra_args.foo=true"]])
def test_second_compose_comes_from_the_cache_and_is_equal(overrides: list[str]) -> None:
    calls = []

    def compose() -> DictConfig:
        calls.append(1)
        return compose_config(overrides)

    first = cached_compose("serve", overrides, compose)
    second = cached_compose("serve", overrides, compose)
    assert len(calls) == 1
    assert OmegaConf.to_yaml(first) == OmegaConf.to_yaml(second)
    assert typed_nodes(first) == typed_nodes(second)
    assert OmegaConf.get_type(second.hw).__name__ == "HardwareConf"
    assert type(second.hw.platform).__name__ == "Platform"
    assert second._get_flag("struct") is True


def test_key_depends_on_config_and_overrides() -> None:
    keys = {compose_key("serve", ["+hw=mi350x"]), compose_key("serve", ["+hw=h200"]),
            compose_key("smoke", ["+hw=mi350x"])}
    assert len(keys) == 3


@pytest.mark.parametrize("content", [
    b"not json",
    b'{"schema": "os:system", "config": {}}',
    b'{"schema": "dspark_cli.config.schema:Platform", "config": {}}',
    b'{"schema": "dspark_cli.config.schema:LaunchConf", "config": {"hw": {"num_gpus": "x"}}}',
    b'{"config": {}}',
], ids=["not-json", "foreign-type", "not-a-dataclass", "invalid-value", "no-schema"])
def test_a_corrupt_entry_is_composed_again(content: bytes) -> None:
    cached_compose("serve", ["+hw=cpu"], lambda: compose_config(["+hw=cpu"]))
    (entry,) = cache_dir().glob("*.json")
    entry.write_bytes(content)
    cfg = cached_compose("serve", ["+hw=cpu"], lambda: compose_config(["+hw=cpu"]))
    assert cfg.hw.name == "cpu"


class Planted:
    """A pickle that would create a file if it were ever unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_a_planted_pickle_is_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Planted(marker))
    key = compose_key("serve", ["+hw=mi350x"])
    cache_dir().mkdir(parents=True)
    for name in (f"{key}.pkl", f"{key}.json"):
        (cache_dir() / name).write_bytes(payload)
    fresh = run_dspark("serve", "+hw=mi350x", "--dry-run", env={"DSPARK_NO_CACHE": "1"})
    for _ in range(2):
        done = run_dspark("serve", "+hw=mi350x", "--dry-run",
                          env={"DSPARK_CACHE_DIR": str(tmp_path)})
        assert (done.returncode, done.stdout, done.stderr) == (
            fresh.returncode, fresh.stdout, fresh.stderr)
    assert "vllm serve /models/DeepSeek-V4-Flash-DSpark" in fresh.stdout
    assert not marker.exists()
    assert json.loads((cache_dir() / f"{key}.json").read_text())["schema"].endswith("LaunchConf")


@pytest.mark.parametrize(("args", "code"), [
    (["serve", "+hw=mi350x", "--dry-run", "--json"], 0),
    (["serve", "+hw=mi350x", "compilation=eager", "--dry-run", "--json"], 1),
    (["serve", "+hw=mi350x", "+hw.extra_key=1", "--dry-run"], 2),
    (["bench", "bench=speed_bench_throughput_1k", "+hw=mi350x", "--dry-run", "--json"], 0),
], ids=["plan", "preflight-fails", "unknown-key", "bench-plan"])
def test_a_cached_dry_run_is_the_fresh_one(tmp_path: Path, args: list[str], code: int) -> None:
    fresh = run_dspark(*args, env={"DSPARK_NO_CACHE": "1"}, cwd=tmp_path)
    assert fresh.returncode == code, fresh.stderr
    for _ in range(2):  # a miss that stores the entry, then a hit
        done = run_dspark(*args, env={"DSPARK_CACHE_DIR": str(tmp_path / "c")}, cwd=tmp_path)
        assert (done.returncode, done.stdout, done.stderr) == (
            fresh.returncode, fresh.stdout, fresh.stderr)


def test_no_cache_switch_writes_nothing(tmp_path: Path) -> None:
    done = run_dspark("serve", "+hw=mi350x", "--dry-run",
                      env={"DSPARK_CACHE_DIR": str(tmp_path / "c"), "DSPARK_NO_CACHE": "1"})
    assert done.returncode == 0
    assert not (tmp_path / "c").exists()


def test_the_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "MAX_ENTRIES", 4)
    base = compose_config(["+hw=cpu"])
    for port in range(8000, 8010):
        overrides = ["+hw=cpu", f"server.port={port}"]
        cached_compose("serve", overrides, lambda: base)
        entries = list(cache_dir().glob("*.json"))
        assert len(entries) <= 4
    kept = {p.stem for p in cache_dir().glob("*.json")}
    newest = {compose_key("serve", ["+hw=cpu", f"server.port={p}"]) for p in range(8006, 8010)}
    assert kept == newest
    assert not list(cache_dir().glob(".*.tmp"))


def test_an_entry_of_another_key_is_a_miss() -> None:
    """Entries are named by a checksum: one holding another key's config is never served."""
    cached_compose("serve", ["+hw=cpu"], lambda: compose_config(["+hw=cpu"]))
    (entry,) = cache_dir().glob("*.json")
    data = json.loads(entry.read_text())
    data["key"] += " "
    data["config"]["server"]["port"] = 1
    entry.write_text(json.dumps(data))
    cfg = cached_compose("serve", ["+hw=cpu"], lambda: compose_config(["+hw=cpu"]))
    assert cfg.server.port != 1


@pytest.mark.parametrize("override", [
    "+hw.env.HF_TOKEN=hf_planted_value", "+serving.extra_args.api_key=planted-value",
    "server.url=http://user:planted-value@127.0.0.1:9",
])
def test_a_composition_with_a_secret_is_never_cached(tmp_path: Path, override: str) -> None:
    done = run_dspark("serve", "+hw=mi350x", override, "--dry-run",
                      env={"DSPARK_CACHE_DIR": str(tmp_path)})
    assert done.returncode in (0, 1, 2), done.stderr
    assert "planted-value" not in "".join(p.read_text() for p in tmp_path.rglob("*.json"))
    assert not list(tmp_path.rglob("*.json"))
