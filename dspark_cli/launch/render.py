"""A launch plan as text: a shell script people can copy, and a dict for --json. Neither ever
holds a secret: the script refers to variables (launch/secrets.py), the dict redacts."""

from __future__ import annotations

from typing import Any

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
