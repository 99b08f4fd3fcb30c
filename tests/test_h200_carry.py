"""The H200 carry (tools/h200): what can be checked without the network or the GPU host. The
locks pin every file by hash, the 0.28 lock carries the torch vLLM pins with what that torch
needs beyond the image, and the scripts parse."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

H200 = REPO / "tools" / "h200"
ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)==(?P<version>\S+) \\\n"
                   r"    --hash=sha256:(?P<sha>[0-9a-f]{64})"
                   r"  # (?P<file>\S+\.(?:whl|tar\.gz))$", re.M)


def pins(lock: Path) -> dict[str, str]:
    text = lock.read_text()
    entries = list(ENTRY.finditer(text))
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(body) == 2 * len(entries), f"{lock.name}: a line that is not a hashed pin"
    names = [m["name"].lower().replace("_", "-") for m in entries]
    assert len(names) == len(set(names)), f"{lock.name}: a package pinned twice"
    return {n: m["version"] for n, m in zip(names, entries, strict=True)}


@pytest.mark.parametrize("lock", sorted(H200.glob("*.lock")), ids=lambda p: p.name)
def test_every_carried_file_is_pinned_by_hash(lock: Path) -> None:
    assert pins(lock)


def test_the_adaptive_lock_carries_the_torch_vllm_pins_and_what_it_links() -> None:
    carried = pins(H200 / "vllm-0.28.0.lock")
    assert carried["vllm"] == "0.28.0"
    # vLLM 0.28.0 pins torch 2.13.0 and torchvision 0.28.0; torch 2.13 pins triton 3.7.1 and
    # calls NCCL functions that the image's NCCL 2.28.9 lacks.
    assert carried["torch"] == "2.13.0" and carried["torchvision"] == "0.28.0"
    assert carried["triton"] == "3.7.1" and carried["nvidia-nccl-cu13"] == "2.29.7"
    # The image's own (torch 2.11's) CUDA libraries serve the rest.
    assert not {n for n in carried if n.startswith(("nvidia-cudnn", "nvidia-cusparselt"))}


@pytest.mark.parametrize("script", sorted(H200.glob("*.sh")), ids=lambda p: p.name)
def test_the_scripts_parse(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
