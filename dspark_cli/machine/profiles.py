"""The hardware profiles in conf/hw, read as plain YAML (no Hydra composition), for detection."""

from __future__ import annotations

from dspark_cli.config.choices import Platform
from dspark_cli.config.typed import read_yaml
from dspark_cli.errors import UsageError
from dspark_cli.machine.detect import detect, match_profile
from dspark_cli.paths import conf_dir


def profile_patterns() -> dict[str, tuple[Platform, tuple[str, ...]]]:
    profiles = {}
    for path in sorted((conf_dir() / "hw").glob("*.yaml")):
        hw = read_yaml(path).get("hw") or {}
        profiles[path.stem] = (Platform(hw.get("platform", "cpu")), tuple(hw.get("detect", [])))
    return profiles


def detected_profile() -> str:
    """The hw profile for this machine, or a usage error naming what was found."""
    return detection()[0]


def detection() -> tuple[str, str]:
    """(the hw profile for this machine, what was found that picked it), or a usage error
    naming what was found."""
    machine = detect()
    try:
        profile = match_profile(machine, profile_patterns())
    except LookupError as e:
        raise UsageError(f"{e}. Pick one explicitly with +hw=<profile> "
                         f"(profiles: {', '.join(profile_patterns())}).") from None
    if not machine.gpus:
        return profile, "no GPU found"
    names = ", ".join(sorted({g.name for g in machine.gpus}))
    return profile, f"{len(machine.gpus)} {machine.platform.value} GPUs: {names}"
