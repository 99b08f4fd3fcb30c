"""The layout's node commands as one shell dispatch: `case "$RANK" in 0) exec ...;; esac`.

Slurm's tasks and the LeaderWorkerSet's pods run the same text; each engine only differs in
the variable that holds the node's rank (`SLURM_NODEID`, `LWS_WORKER_INDEX`) and in where the
head's address comes from, which the caller exports as `DSPARK_HEAD_ADDR` first. Pure.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from dspark_cli.launch.layout import HEAD_ADDR, NodeLayout
from dspark_cli.launch.render import export_line

HEAD_VAR = "DSPARK_HEAD_ADDR"
BAD_RANK_EXIT = 64  # EX_USAGE: the engine gave a rank the layout has no command for


def shell_word(arg: str) -> str:
    """One argv word, quoted for the shell, with the head placeholder left to expand."""
    parts = [shlex.quote(p) if p else "" for p in arg.split(HEAD_ADDR)]
    return f'"${{{HEAD_VAR}}}"'.join(parts) or "''"


def command_text(argv: Sequence[str], indent: str) -> str:
    """The argv as shell words: the positional part first, then one option per line."""
    first_flag = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    lines = [" ".join(shell_word(a) for a in argv[:first_flag])]
    current: list[str] = []
    for arg in argv[first_flag:]:
        if arg.startswith("--") and current:
            lines.append(" ".join(current))
            current = []
        current.append(shell_word(arg))
    if current:
        lines.append(" ".join(current))
    return f" \\\n{indent}  ".join(lines)


def exports(env: Mapping[str, str] | Sequence[tuple[str, str]], indent: str = "") -> list[str]:
    """`export` lines; a secret is taken from the caller's environment, never written."""
    items = env.items() if isinstance(env, Mapping) else env
    return [indent + export_line(name, value) for name, value in items]


def dispatch(layout: NodeLayout, rank_expr: str, argv_of: Mapping[int, Sequence[str]] | None = None,
             common_env: Mapping[str, str] | None = None) -> str:
    """The `case` over node ranks: each branch exports the node's own environment (what
    differs from `common_env`) and `exec`s its command, so the engine's signals reach vLLM.
    `argv_of` replaces a rank's argv (the command that really runs vLLM on this host)."""
    common = dict(common_env or {})
    out = [f'case "{rank_expr}" in']
    for launch in layout.launches:
        argv = (argv_of or {}).get(launch.rank, launch.argv)
        own = [(k, v) for k, v in launch.env.items() if common.get(k) != v]
        out.append(f"  {launch.rank})")
        out += exports(own, "    ")
        out.append("    exec " + command_text(argv, "    "))
        out.append("    ;;")
    out += ["  *)",
            f'    echo "dspark: no command for node rank {rank_expr}; the layout has '
            f'{layout.nodes} nodes" >&2',
            f"    exit {BAD_RANK_EXIT}",
            "    ;;",
            "esac"]
    return "\n".join(out) + "\n"
