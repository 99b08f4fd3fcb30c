"""A command's line split: dspark's own flags (the command's argparse parser), Hydra's flags
and the overrides; a flag neither knows is refused with what was probably meant."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable

from dspark_cli.cli.help import HYDRA_FLAGS
from dspark_cli.errors import UsageError
from dspark_cli.launch.vllm_options import override_for


def flag_parser(name: str, add_arguments: Callable[[argparse.ArgumentParser], None]
                ) -> argparse.ArgumentParser:
    """`dspark <name>`'s own flags: help, --debug and the command's."""
    parser = argparse.ArgumentParser(prog=f"dspark {name}", add_help=False, allow_abbrev=False)
    parser.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    parser.add_argument("--debug", action="store_true",
                        help="show Python tracebacks for errors")
    add_arguments(parser)
    return parser


def own_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The long flags of a command's parser (`--dry-run`, `--json`, ...)."""
    return [s for a in parser._actions for s in a.option_strings if s.startswith("--")]


def hydra_flags() -> set[str]:
    """Every option string Hydra's own command line accepts (`--cfg`, `-m`, `-sc`, ...)."""
    from hydra._internal.utils import get_args_parser

    return {s for action in get_args_parser()._actions for s in action.option_strings}


def unknown_flag(name: str, words: list[str], at: int, known: list[str],
                 composes: bool = True) -> UsageError:
    """The refusal of `words[at]`, a flag `dspark <name>` lacks: the close flag it has, else
    (for a command that `composes` a config) the override that sets the `vllm serve` option of
    that name (`--max-num-seqs 512` -> `serving.args.max_num_seqs=512`)."""
    flag, eq, value = words[at].partition("=")
    following = words[at + 1] if at + 1 < len(words) else None
    if not eq and following and not following.startswith("-") and "=" not in following:
        value = following
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
    if close:
        return UsageError(f"unknown flag {flag!r} for `dspark {name}`; did you mean "
                          f"{close[0]}? `dspark {name} --help` lists its flags.")
    setting = override_for(flag, value or None) if composes else None
    if setting:
        return UsageError(f"{flag!r} is a `vllm serve` flag, not one of `dspark {name}`'s: "
                          f"dspark sets vLLM's options through its config; write {setting} "
                          "instead (docs/configuration.md).")
    return UsageError(f"unknown flag {flag!r} for `dspark {name}`; `dspark {name} --help` "
                      "lists its flags.")


def split_hydra_args(name: str, rest: list[str],
                     parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """(overrides, Hydra flags with their values), refusing a flag Hydra does not know."""
    plain = [o for o in rest if not o.startswith("-") and ("=" in o or o[:1] in "+~")]
    flags = [o for o in rest if o not in plain]
    if any(o.startswith("-") for o in flags):
        known = hydra_flags()
        for at, word in enumerate(rest):
            if word.startswith("-") and word.split("=")[0] not in known:
                raise unknown_flag(name, rest, at, [*own_flags(parser), *HYDRA_FLAGS])
        _check_hydra_flags(name, flags)
    return plain, flags


def _check_hydra_flags(name: str, flags: list[str]) -> None:
    """Hydra's flags read by Hydra's own parser, a mistake said in one line (`--cfg` without
    its value) rather than as Hydra's usage block."""
    from hydra._internal.utils import get_args_parser

    hydra = get_args_parser()
    hydra.exit_on_error = False
    try:
        hydra.parse_args(flags)
    except argparse.ArgumentError as e:
        raise UsageError(f"{e}; `dspark {name} --help` lists the flags.") from None


def bare_words(flags: list[str]) -> list[str]:
    """Words among the Hydra flags that are no flag's value: overrides without `=`, which
    Hydra would refuse with its lexer's dump."""
    from hydra._internal.utils import get_args_parser

    takes_value = {s for a in get_args_parser()._actions if a.nargs != 0
                   for s in a.option_strings}
    words, after_flag = [], False
    for word in flags:
        if not word.startswith("-") and not after_flag:
            words.append(word)
        after_flag = word.split("=")[0] in takes_value and "=" not in word
    return words


def refuse_leftovers(name: str, rest: list[str], parser: argparse.ArgumentParser) -> None:
    """A command that composes no config takes its own flags only: anything left is refused."""
    if not rest:
        return
    if rest[0].startswith("-"):
        raise unknown_flag(name, rest, 0, own_flags(parser), composes=False)
    raise UsageError(f"unexpected argument {rest[0]!r} for `dspark {name}`; "
                     f"`dspark {name} --help` says what it takes.")
