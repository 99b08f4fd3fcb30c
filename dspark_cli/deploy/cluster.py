"""What the cluster targets (Slurm, Kubernetes) share: the node script, the dry run's JSON and
the deployment record.

The node script is the layout's node commands as one shell dispatch: `case "$RANK" in 0) exec
...;; esac`. Slurm's tasks and the LeaderWorkerSet's pods run the same text; each engine only
differs in the variable that holds the node's rank (`SLURM_NODEID`, `LWS_WORKER_INDEX`) and in
where the head's address comes from, which the caller exports as `DSPARK_HEAD_ADDR` first. A URL
password is never written: the text refers to `${DSPARK_URL_PASSWORD_N}` (`url_refs`), which the
engine puts into the job's environment (Slurm: the submitting environment; Kubernetes: a
Secret). Pure.

The deployment record (`deployment.json`) is what a cluster engine runs for dspark, written to
the run directory the moment it exists: should dspark be killed (`kill -9`, the OOM killer) no
teardown runs, and the record still names the job or objects and the shell lines that end them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dspark_cli.console import json_text, progress
from dspark_cli.errors import UsageError
from dspark_cli.launch import vllm_options
from dspark_cli.launch.layout import HEAD_ADDR, NodeLayout
from dspark_cli.launch.render import export_line, is_secret, layout_dict
from dspark_cli.launch.secrets import ShellRefs
from dspark_cli.paths import DEPLOYMENT_JSON
from dspark_cli.status import Finding
from dspark_cli.untrusted import write_atomic

HEAD_VAR = "DSPARK_HEAD_ADDR"
BAD_RANK_EXIT = 64  # EX_USAGE: the engine gave a rank the layout has no command for


LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def is_loopback(address: str) -> bool:
    """Whether `address` names this host only (127.0.0.0/8, ::1, localhost, 0.0.0.0, ::)."""
    name = address.strip().strip("[]").rstrip(".").lower()
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return name in LOOPBACK_NAMES or name.endswith(".localhost")
    return ip.is_loopback or ip.is_unspecified


def refuse_loopback_head(layout: NodeLayout, target: str) -> None:
    """On a cluster every node is another machine: a head address that means "this host"
    would send each node to itself. UsageError naming the key."""
    address = layout.head_address
    if address is not None and is_loopback(address):
        raise UsageError(f"hw.head_address={address!r} is this host's own address, but "
                         f"{target} runs the nodes on other machines, where it would mean "
                         "each node itself; leave hw.head_address null (the engine gives the "
                         "head's address at run time) or give the head's cluster address")


def _env_items(env: Mapping[str, str] | Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(env.items() if isinstance(env, Mapping) else env)


def url_refs(layout: NodeLayout, env: Mapping[str, str] | Iterable[tuple[str, str]] = ()
             ) -> ShellRefs:
    """The URL passwords of the layout's environments and commands, each named once, in a fixed
    order (the plan's env, each node's env, each node's argv), so every rendering of the same
    layout refers to the same variables."""
    refs = ShellRefs()
    texts = [v for k, v in _env_items(env) if not is_secret(k)]
    texts += [v for n in layout.launches for k, v in n.env.items() if not is_secret(k)]
    texts += [a for n in layout.launches for a in n.argv]
    for text in texts:
        refs.register(text)
    return refs


def secret_environment(layout: NodeLayout, env: Mapping[str, str] | Iterable[tuple[str, str]],
                       refs: ShellRefs) -> dict[str, str]:
    """Name -> value of every secret the rendered text refers to instead of holding: the
    secret-named variables of the plan and the nodes, and the URL passwords' variables. What the
    engine must carry into the job (never written by dspark)."""
    out = {k: v for k, v in _env_items(env) if is_secret(k)}
    out |= {k: v for n in layout.launches for k, v in n.env.items() if is_secret(k)}
    return out | refs.variables()


def shell_word(arg: str, refs: ShellRefs | None = None) -> str:
    """One argv word, quoted for the shell, with the head placeholder left to expand and URL
    passwords as variable references."""
    refs = refs or ShellRefs()
    parts = [refs.word(p) if p else "" for p in arg.split(HEAD_ADDR)]
    return f'"${{{HEAD_VAR}}}"'.join(parts) or "''"


def command_text(argv: Sequence[str], indent: str, refs: ShellRefs | None = None) -> str:
    """The argv as shell words: the positional part first, then one option per line."""
    refs = refs or ShellRefs()
    first_flag = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    lines = [" ".join(shell_word(a, refs) for a in argv[:first_flag])]
    current: list[str] = []
    for arg in argv[first_flag:]:
        if arg.startswith("--") and current:
            lines.append(" ".join(current))
            current = []
        current.append(shell_word(arg, refs))
    if current:
        lines.append(" ".join(current))
    return f" \\\n{indent}  ".join(lines)


def exports(env: Mapping[str, str] | Sequence[tuple[str, str]], indent: str = "",
            refs: ShellRefs | None = None) -> list[str]:
    """`export` lines; a secret is taken from the caller's environment, never written."""
    refs = refs or ShellRefs()
    return [indent + export_line(name, value, refs) for name, value in _env_items(env)]


def dispatch(layout: NodeLayout, rank_expr: str, argv_of: Mapping[int, Sequence[str]] | None = None,
             common_env: Mapping[str, str] | None = None, refs: ShellRefs | None = None) -> str:
    """The `case` over node ranks: each branch exports the node's own environment (what
    differs from `common_env`) and `exec`s its command, so the engine's signals reach vLLM.
    `argv_of` replaces a rank's argv (the command that really runs vLLM on this host)."""
    refs = refs or url_refs(layout, common_env or {})
    common = dict(common_env or {})
    out = [f'case "{rank_expr}" in']
    for launch in layout.launches:
        argv = (argv_of or {}).get(launch.rank, launch.argv)
        own = [(k, v) for k, v in launch.env.items() if common.get(k) != v]
        out.append(f"  {launch.rank})")
        out += exports(own, "    ", refs)
        out.append("    exec " + command_text(argv, "    ", refs))
        out.append("    ;;")
    out += ["  *)",
            f'    echo "dspark: no command for node rank {rank_expr}; the layout has '
            f'{layout.nodes} nodes" >&2',
            f"    exit {BAD_RANK_EXIT}",
            "    ;;",
            "esac"]
    return "\n".join(out) + "\n"


# -- the dry run's JSON and the deployment record -------------------------------------------
def cluster_json(target: str, layout: NodeLayout, rendered: Mapping[str, Any],
                 findings: tuple[Finding, ...]) -> dict[str, Any]:
    """A cluster target's dry run as JSON: the target, its node layout (secrets redacted), what
    it renders, and the preflight."""
    return {"target": target, "layout": layout_dict(layout), **rendered,
            "vllm_options": vllm_options.source().to_dict(),
            "preflight": [f.to_dict() for f in findings]}


def record_deployment(directory: Path, deployment: str, cancel: Sequence[str]) -> Path:
    """Write the record and say how to end the deployment by hand."""
    path = directory / DEPLOYMENT_JSON
    write_atomic(path, json_text({"deployment": deployment, "cancel": list(cancel)}))
    progress(f"{deployment} is recorded in {path}; should dspark die before it ends it: "
             + " && ".join(cancel))
    return path
