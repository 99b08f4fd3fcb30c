"""Where the installed vLLM keeps `vllm serve`'s argument parser: `make_arg_parser` and
`validate_parsed_serve_args` live in `vllm.entrypoints.launchers.cli_args` in vLLM 0.32 and in
`vllm.entrypoints.openai.cli_args` in vLLM 0.26 (the H200 image's), which has no
`vllm.entrypoints.launchers` package. Imported only inside the helpers' subprocesses."""

from __future__ import annotations

from types import ModuleType

MODULES = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")


def serve_cli_args() -> ModuleType:
    """The installed vLLM's serve argument module, the newest place first; ModuleNotFoundError
    (that of the newest place) when neither is there."""
    import importlib

    first: ModuleNotFoundError | None = None
    for name in MODULES:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:
            # Only the module itself missing moves on; a dependency it lacks (torch) is the
            # answer.
            if e.name is None or not name.startswith(e.name):
                raise
            first = first or e
    assert first is not None
    raise first
