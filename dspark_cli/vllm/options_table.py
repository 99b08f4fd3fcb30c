"""Dump the installed vLLM's `vllm serve` options as the table dspark plans with.

`python -m dspark_cli.vllm.options_table` rewrites `dspark_cli/launch/vllm_serve_options.json`
from vLLM's own argument parser; a test checks that the table matches the installed vLLM. The
table lets planning (which never imports vLLM) resolve a free-form key exactly as vLLM's parser
would: aliases, `--no-` forms, abbreviations, and each option's type.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TABLE = Path(__file__).resolve().parents[1] / "launch" / "vllm_serve_options.json"
_TYPES = {"int": "int", "float": "float", "human_readable_int": "human_int",
          "human_readable_int_or_auto": "int_or_auto"}


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


def dump() -> dict:
    """{dest: {flags, kind, type, choices}} for every option of `vllm serve`."""
    from dspark_cli.vllm.shim import patch_version_lookup

    patch_version_lookup()
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
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


if __name__ == "__main__":
    TABLE.write_text(json.dumps(dump(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {TABLE}")
