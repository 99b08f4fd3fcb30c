"""The package's imports: no cycle (every import counts: module level, inside functions, under
TYPE_CHECKING) and layers that point one way (commands -> features -> launch/server/deploy ->
config, vllm, machine -> checks/errors). Read from the source with `ast`, as written."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "dspark_cli"


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every dspark_cli module `path` imports, wherever the import statement is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                 if isinstance(node, ast.ImportFrom) and node.module and not node.level
                 else [])
        found |= {n for n in names if n in modules}
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module(p): p for p in PACKAGE.rglob("*.py")}
    return {m: _imports(p, set(paths)) - {m} for m, p in paths.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*stack[stack.index(n):], n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycle_anywhere_in_the_package() -> None:
    graph = _graph()
    assert len(graph) > 100 and any(graph.values()), "the walk found the package"
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_a_cycle_is_found_when_there_is_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


FEATURES = ("dspark_cli.cli", "dspark_cli.commands", "dspark_cli.smoke", "dspark_cli.bench",
            "dspark_cli.validate", "dspark_cli.report", "dspark_cli.accuracy", "dspark_cli.hostenv")
MIDDLE = ("dspark_cli.launch", "dspark_cli.server", "dspark_cli.deploy")
# package -> the packages it must never import (a lower layer never reaches up; within a
# layer, the cycle test above is the rule). deploy is the start step: launch and server,
# below it, never import it.
FORBIDDEN = {
    "dspark_cli.validate": ("dspark_cli.cli", "dspark_cli.commands"),
    "dspark_cli.hostenv": ("dspark_cli.cli", "dspark_cli.commands"),
    "dspark_cli.smoke": ("dspark_cli.cli", "dspark_cli.commands"),
    "dspark_cli.bench": ("dspark_cli.cli", "dspark_cli.commands"),
    "dspark_cli.accuracy": ("dspark_cli.cli", "dspark_cli.commands", "dspark_cli.validate",
                            "dspark_cli.report"),
    "dspark_cli.deploy": FEATURES,
    "dspark_cli.launch": (*FEATURES, "dspark_cli.deploy"),
    "dspark_cli.server": (*FEATURES, "dspark_cli.deploy"),
    "dspark_cli.config": (*FEATURES, *MIDDLE, "dspark_cli.vllm"),
    "dspark_cli.vllm": (*FEATURES, *MIDDLE),
    "dspark_cli.machine": (*FEATURES, *MIDDLE),
}


def test_layers_point_one_way() -> None:
    wrong = sorted((m, n) for m, imported in _graph().items() for n in imported
                   for pkg, banned in FORBIDDEN.items()
                   if (m == pkg or m.startswith(pkg + ".")) and n.startswith(banned))
    assert wrong == []


def test_the_deploy_target_is_named_in_one_place() -> None:
    """`deploy.target` is looked up in deploy/start.py only (the registry); every other module
    asks the target's entry (here, render, findings, deployment)."""
    readers = sorted(str(p.relative_to(REPO)) for p in PACKAGE.rglob("*.py")
                     if "deploy.target)" in p.read_text() or "deploy.target ==" in p.read_text())
    assert readers == ["dspark_cli/deploy/start.py"]


def test_only_the_command_edge_and_config_import_omegaconf() -> None:
    """The edge (cli/, commands/) turns the composed config into the schema's dataclasses
    (config/typed.py); every layer below takes those, so none of it imports OmegaConf."""
    edge = ("dspark_cli/cli/", "dspark_cli/commands/", "dspark_cli/config/")
    importers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "omegaconf" for n in names):
                importers.add(str(path.relative_to(REPO)))
    assert importers and all(p.startswith(edge) for p in importers), sorted(importers)
