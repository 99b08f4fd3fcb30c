"""The installed vLLM's `vllm serve` options, derived from its own argument parser, as the
table dspark plans with.

`python -m dspark_cli.vllm.options_table` prints the table as JSON: dspark runs it in a
subprocess (`derive`), once per vLLM version and commit (`vllm/options_cache.py` keeps it), so
vLLM's import (seconds) and its side effects stay out of dspark. `--shipped` rewrites the table
shipped for machines without vLLM (`dspark_cli/launch/vllm_serve_options.json`). The table lets
planning (which never imports vLLM) resolve a free-form key exactly as vLLM's parser would:
aliases, `--no-` forms, abbreviations, and each option's type.

A table read back (the cache may be shared, the shipped file edited) is data only: `checked`
holds it to the format below before anything uses it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

SHIPPED = Path(__file__).resolve().parents[1] / "launch" / "vllm_serve_options.json"
FORMAT = 1  # of an entry: {"format", "vllm": {dist, version, commit}, "options": {dest: ...}}
KINDS = ("bool", "flag", "value", "list")
TYPES = ("int", "float", "human_int", "int_or_auto", "str")
_TYPES = {"int": "int", "float": "float", "human_readable_int": "human_int",
          "human_readable_int_or_auto": "int_or_auto"}
DERIVE_TIMEOUT_S = 180.0  # importing vLLM's parser: 5-8 s on 2 idle cores, more under load


class DeriveError(Exception):
    """The installed vLLM's parser could not be read (`importable`: False when vLLM or torch
    cannot even be imported here)."""

    def __init__(self, message: str, importable: bool = True) -> None:
        super().__init__(message)
        self.importable = importable


def _type_name(kind: object) -> str:
    """The option's value type; vLLM's `_optional_type(int)` wrapper is unwrapped."""
    name = getattr(kind, "__name__", None)
    if name == "_optional_type" and getattr(kind, "__closure__", None):
        inner = [c.cell_contents for c in kind.__closure__]
        name = getattr(inner[0], "__name__", None) if inner else name
    return _TYPES.get(str(name), "str")


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse.BooleanOptionalAction):
        return "bool"
    if action.nargs == 0:
        return "flag"
    return "list" if action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction) \
        else "value"


def dump() -> dict[str, dict[str, Any]]:
    """{dest: {flags, kind, type, choices}} for every option of `vllm serve` (imports vLLM)."""
    from dspark_cli.vllm.shim import patch_version_lookup

    patch_version_lookup()
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from dspark_cli.vllm.serve_args import serve_cli_args

    parser = serve_cli_args().make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    table: dict[str, dict] = {}
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        choices = ([c for c in action.choices if c is not None]
                   if action.choices is not None else None)
        entry = table.setdefault(action.dest, {"flags": [], "kind": _kind(action),
                                               "type": _type_name(action.type),
                                               "choices": choices})
        entry["flags"] += [s for s in action.option_strings if s not in entry["flags"]]
    return dict(sorted(table.items()))


def checked(data: object) -> dict[str, dict[str, Any]]:
    """An entry's options, held to the format; ValueError names the first thing wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError("not an option table of this format")
    options = data.get("options")
    if not isinstance(options, dict) or not options:
        raise ValueError("no options")
    for dest, entry in options.items():
        if not (isinstance(dest, str) and dest.isidentifier() and isinstance(entry, dict)):
            raise ValueError(f"bad option {dest!r}")
        flags, choices = entry.get("flags"), entry.get("choices")
        if not (isinstance(flags, list) and flags and all(
                isinstance(f, str) and re.fullmatch(r"--?[A-Za-z0-9][A-Za-z0-9_.-]*", f)
                for f in flags) and flags[0].startswith("--")):
            raise ValueError(f"{dest}: bad flags")
        if entry.get("kind") not in KINDS or entry.get("type") not in TYPES:
            raise ValueError(f"{dest}: bad kind or type")
        if choices is not None and not (isinstance(choices, list) and all(
                isinstance(c, str | int | float) for c in choices)):
            raise ValueError(f"{dest}: bad choices")
        if set(entry) != {"flags", "kind", "type", "choices"}:
            raise ValueError(f"{dest}: unknown fields")
    return options


def entry(vllm: dict[str, str | None], options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"format": FORMAT, "vllm": vllm, "options": options}


def derive(timeout: float = DERIVE_TIMEOUT_S) -> dict[str, dict[str, Any]]:
    """The installed vLLM's options, from its parser in a subprocess; DeriveError if not."""
    import subprocess  # only a cache miss runs one
    import tempfile

    # Its own TMPDIR, removed after: importing vLLM leaves torch's caches there
    # (torchinductor_<user>), and the user's TMPDIR is not dspark's to fill.
    with tempfile.TemporaryDirectory(prefix="dspark-options-") as scratch:
        env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "TMPDIR": scratch}
        try:
            done = subprocess.run([sys.executable, "-m", "dspark_cli.vllm.options_table"],
                                  capture_output=True, text=True, timeout=timeout, env=env,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise DeriveError(f"reading its parser took over {timeout:.0f} s") from e
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "import_error" in answer:
        raise DeriveError(f"it cannot be imported ({answer['import_error']})", importable=False)
    if done.returncode != 0 or not isinstance(answer, dict):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DeriveError(f"reading its parser failed (exit {done.returncode}: {tail})")
    try:
        return checked(entry({}, answer))
    except ValueError as e:
        raise DeriveError(f"its parser gave no usable table ({e})") from e


def _main() -> int:
    try:
        options = dump()
    except ModuleNotFoundError as e:  # vLLM or torch is not installed (or broken) here
        print("\n" + json.dumps({"import_error": str(e)}))
        return 0
    if sys.argv[1:] == ["--shipped"]:  # written from a release wheel: no commit of its own
        import importlib.metadata as metadata

        from dspark_cli.vllm.shim import installed_vllm

        dist = installed_vllm() or "vllm"
        identity = {"dist": dist, "version": metadata.version(dist), "commit": None}
        SHIPPED.write_text(json.dumps(entry(identity, options), indent=1, sort_keys=True)
                           + "\n")
        print(f"wrote {SHIPPED}", file=sys.stderr)
        return 0
    sys.stdout.flush()
    print("\n" + json.dumps(options))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
