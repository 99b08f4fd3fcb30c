"""A launch plan as text: a shell script people can copy, and a dict for --json."""

from __future__ import annotations

import re
import shlex
from typing import Any

from dspark_cli.launch.plan import LaunchPlan

SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.IGNORECASE)


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def export_line(name: str, value: str) -> str:
    """`export NAME=value`; a secret is never printed: the line takes it from the caller's env."""
    if is_secret(name):
        return f'export {name}="${{{name}:?set {name} in the environment}}"'
    return f"export {name}={shlex.quote(value)}"


def command_lines(argv: tuple[str, ...] | list[str]) -> str:
    """argv as a multi-line shell command: the positional part first, then one option per line."""
    argv = list(argv)
    first_flag = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    lines = [" ".join(shlex.quote(a) for a in argv[:first_flag])]
    current: list[str] = []
    for arg in argv[first_flag:]:
        if arg.startswith("--") and current:
            lines.append(" ".join(current))
            current = []
        current.append(shlex.quote(arg))
    if current:
        lines.append(" ".join(current))
    return " \\\n  ".join(lines)


def shell_script(plan: LaunchPlan, argv: tuple[str, ...] | list[str] | None = None) -> str:
    """The plan as a runnable shell script body (exports, then the command)."""
    exports = [export_line(k, v) for k, v in plan.env]
    return "\n".join([*exports, command_lines(argv or plan.argv)]) + "\n"


def plan_dict(plan: LaunchPlan) -> dict[str, Any]:
    return {
        "env": {k: ("<redacted>" if is_secret(k) else v) for k, v in plan.env},
        "argv": list(plan.argv),
        "base_url": plan.base_url,
        "model_path": plan.model_path,
        "served_model_name": plan.served_model_name,
    }
