"""Hardware detection from real probe output formats and a real sysfs-shaped tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark_cli.config.choices import Platform
from dspark_cli.machine.detect import (
    Gpu,
    Machine,
    detect,
    gfx_name,
    match_profile,
    parse_nvidia_smi,
)
from dspark_cli.machine.profiles import profile_patterns
from tests.fake_gpu import fake_host

NVIDIA_SMI = "0, NVIDIA H200, 143771, 570.86.15, 9.0\n1, NVIDIA H200, 143771, 570.86.15, 9.0\n"


def test_parse_nvidia_smi() -> None:
    gpus, driver = parse_nvidia_smi(NVIDIA_SMI)
    assert gpus == (Gpu(0, "NVIDIA H200", "sm_90", 143771), Gpu(1, "NVIDIA H200", "sm_90", 143771))
    assert driver == "570.86.15"


@pytest.mark.parametrize(("version", "name"), [(90500, "gfx950"), (90402, "gfx942"),
                                               (90010, "gfx90a")])
def test_gfx_name(version: int, name: str) -> None:
    assert gfx_name(version) == name


@pytest.mark.parametrize(("machine", "profile"), [
    (Machine(Platform.cpu), "cpu"),
    (Machine(Platform.cuda, (Gpu(0, "NVIDIA H200", "sm_90"),)), "h200"),
    (Machine(Platform.cuda, (Gpu(0, "NVIDIA B200", "sm_100"),)), "b200"),
    (Machine(Platform.rocm, (Gpu(0, "AMD Instinct MI355X", "gfx950"),)), "mi355x"),
    (Machine(Platform.rocm, (Gpu(0, "AMD Instinct MI350X", "gfx950"),)), "mi350x"),
    (Machine(Platform.rocm, (Gpu(0, "gfx950", "gfx950"),)), "mi350x"),
    (Machine(Platform.rocm, (Gpu(0, "gfx942", "gfx942"),)), "mi300x"),
])
def test_profiles_match_detected_devices(machine: Machine, profile: str) -> None:
    assert match_profile(machine, profile_patterns()) == profile


def test_an_unknown_gpu_matches_no_profile() -> None:
    machine = Machine(Platform.cuda, (Gpu(0, "NVIDIA A100-SXM4-80GB", "sm_80"),))
    with pytest.raises(LookupError, match="A100"):
        match_profile(machine, profile_patterns())


def test_detect_reads_the_kfd_topology(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in fake_host(tmp_path / "bin", "no-gpu").items():
        monkeypatch.setenv(key, value)
    nodes = tmp_path / "nodes"
    for node, version in enumerate([0, 90500, 90500]):  # node 0 is the CPU
        (nodes / str(node)).mkdir(parents=True)
        (nodes / str(node) / "properties").write_text(
            f"cpu_cores_count 0\ngfx_target_version {version}\nsimd_count 1024\n")
    monkeypatch.setenv("DSPARK_KFD_NODES", str(nodes))
    machine = detect()
    assert machine.platform is Platform.rocm
    assert [g.arch for g in machine.gpus] == ["gfx950", "gfx950"]


@pytest.mark.parametrize(("host", "machine"), [
    ("no-gpu", Machine(Platform.cpu)),
    ("h200x8", Machine(Platform.cuda, tuple(Gpu(i, "NVIDIA H200", "sm_90", 143771)
                                            for i in range(8)), "570.86.15")),
])
def test_detect_asks_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str,
                                machine: Machine) -> None:
    for key, value in fake_host(tmp_path, host).items():
        monkeypatch.setenv(key, value)
    assert detect() == machine
