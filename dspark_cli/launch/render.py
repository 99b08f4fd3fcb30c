"""A launch plan as text: a shell script people can copy, and a dict for --json; a multi-node
layout as one shell block per node (what to run on that node) and its dict. None ever holds a
secret: the scripts refer to variables (launch/secrets.py), the dicts redact. The head's address
placeholder stays a shell variable the operator exports on every node."""

from __future__ import annotations

import shlex
from typing import Any

from dspark_cli.launch.layout import HEAD_ADDR, HEAD_ADDR_VAR, NodeLaunch, NodeLayout
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.secrets import ShellRefs, env_value, is_secret_name, redact_urls

is_secret = is_secret_name  # the name every writer of env maps asks


def export_line(name: str, value: str, refs: ShellRefs | None = None) -> str:
    """`export NAME=value`; a secret is never printed: the line takes it from the caller's env."""
    if is_secret(name):
        return f'export {name}="${{{name}:?set {name} in the environment}}"'
    return f"export {name}={(refs or ShellRefs()).word(value)}"


def command_lines(argv: tuple[str, ...] | list[str], refs: ShellRefs | None = None) -> str:
    """argv as a multi-line shell command: the positional part first, then one option per line."""
    refs = refs or ShellRefs()
    argv = list(argv)
    first_flag = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    lines = [" ".join(refs.word(a) for a in argv[:first_flag])]
    current: list[str] = []
    for arg in argv[first_flag:]:
        if arg.startswith("--") and current:
            lines.append(" ".join(current))
            current = []
        current.append(refs.word(arg))
    if current:
        lines.append(" ".join(current))
    return " \\\n  ".join(lines)


def shell_script(plan: LaunchPlan, argv: tuple[str, ...] | list[str] | None = None) -> str:
    """The plan as a runnable shell script body (exports, then the command); URL passwords are
    demanded from the environment first."""
    refs = ShellRefs()
    exports = [export_line(k, v, refs) for k, v in plan.env]
    command = command_lines(argv or plan.argv, refs)
    return "\n".join([*refs.exports(), *exports, command]) + "\n"


def plan_dict(plan: LaunchPlan) -> dict[str, Any]:
    return {
        "env": {k: env_value(k, v) for k, v in plan.env},
        "argv": [redact_urls(a) for a in plan.argv],
        "base_url": redact_urls(plan.base_url),
        "model_path": redact_urls(plan.model_path),
        "served_model_name": plan.served_model_name,
    }


# -- a multi-node layout -----------------------------------------------------------------
_QUOTED_HEAD = shlex.quote(HEAD_ADDR)


def _node_heading(layout: NodeLayout, node: NodeLaunch) -> str:
    role = (f"serves the API on port {node.api_port}" if node.serves_api else "headless")
    head = "the head, " if node.rank == 0 else ""
    return f"# node {node.rank} of {layout.nodes} ({head}{layout.mode}): {role}"


def node_script(layout: NodeLayout, node: NodeLaunch) -> str:
    """One node's block: its exports and its command; `${DSPARK_HEAD_ADDR}` stays expandable,
    and a URL password is demanded from the environment first, as in launch.sh."""
    lines = [_node_heading(layout, node)]
    if any(HEAD_ADDR in a for a in node.argv):
        lines.append(f'export {HEAD_ADDR_VAR}="${{{HEAD_ADDR_VAR}:?set {HEAD_ADDR_VAR} to the '
                     'address of the head node}"')
    refs = ShellRefs()
    body = [export_line(k, v, refs) for k, v in node.env.items()]
    body.append(command_lines(node.argv, refs).replace(_QUOTED_HEAD, f'"{HEAD_ADDR}"'))
    return "\n".join([*lines, *refs.exports(), *body]) + "\n"


def layout_script(layout: NodeLayout) -> str:
    """Every node's block, rank order, a blank line between them."""
    return "\n".join(node_script(layout, node) for node in layout.launches)


def layout_dict(layout: NodeLayout) -> dict[str, Any]:
    """The layout for --json, redacted as `plan_dict` is: secret-named variables' values, and
    URL passwords in every other value and in every argument."""
    doc = layout.to_dict()
    for node in doc["launches"]:
        node["env"] = {k: env_value(k, v) for k, v in node["env"].items()}
        node["argv"] = [redact_urls(a) for a in node["argv"]]
    return doc
