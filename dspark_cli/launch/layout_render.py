"""A multi-node layout as text: one shell block per node (what to run on that node), and a dict
for --json. Secrets are rendered as for one node (`render.export_line`); the head's address
placeholder stays a shell variable the operator exports on every node."""

from __future__ import annotations

import shlex
from typing import Any

from dspark_cli.launch.layout import HEAD_ADDR, HEAD_ADDR_VAR, NodeLaunch, NodeLayout
from dspark_cli.launch.render import command_lines, export_line
from dspark_cli.launch.secrets import ShellRefs, env_value, redact_urls

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
