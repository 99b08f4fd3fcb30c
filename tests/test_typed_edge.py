"""Typed values below the edge: `config/typed.plain` (a config value back as dicts) is called
only where JSON or YAML is written, and `config/typed.select` (a lookup by dotted name) only
where the key is the user's, not the code's. Every other reader takes the schema's dataclass
fields. Read from the source with `ast`, as written: calls through any alias count."""

from __future__ import annotations

import ast
import dataclasses

from dspark_cli.config.deploy import K8sConf
from dspark_cli.deploy.k8s.target import k8s_spec
from tests.conftest import REPO, compose_typed

PACKAGE = REPO / "dspark_cli"
TYPED = "dspark_cli.config.typed"
# function -> {file: why it may call it}; the whole list, nothing else may call them
ALLOWED = {
    "plain": {
        "dspark_cli/launch/record.py": "writes the run's config.yaml (the redacted config)",
    },
    "select": {
        "dspark_cli/smoke/expectations.py": "`smoke.conditional_lines[].when` names config "
                                            "keys: the user's, known only at run time",
    },
}


def calls(source: str) -> set[str]:
    """Which of `plain`/`select` of config/typed.py the module calls, under any name."""
    tree = ast.parse(source)
    names: dict[str, str] = {}  # local name -> the typed function it is
    modules: set[str] = set()  # local names of the typed module itself
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == TYPED:
            names |= {a.asname or a.name: a.name for a in node.names if a.name in ALLOWED}
        elif isinstance(node, ast.ImportFrom) and node.module == "dspark_cli.config":
            modules |= {a.asname or a.name for a in node.names if a.name == "typed"}
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name == TYPED and a.asname}
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in names:
            found.add(names[func.id])
        elif (isinstance(func, ast.Attribute) and func.attr in ALLOWED
              and (ast.unparse(func.value) in modules or ast.unparse(func.value) == TYPED)):
            found.add(func.attr)
    return found


def test_plain_and_select_are_called_only_by_the_named_callers() -> None:
    callers: dict[str, set[str]] = {name: set() for name in ALLOWED}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel == "dspark_cli/config/typed.py":
            continue
        for name in calls(path.read_text()):
            callers[name].add(rel)
    assert callers == {name: set(files) for name, files in ALLOWED.items()}


def test_a_call_is_found_under_any_name() -> None:
    assert calls(f"from {TYPED} import plain\nplain(cfg.hw)\n") == {"plain"}
    assert calls(f"from {TYPED} import select as s\ns(cfg, 'a.b')\n") == {"select"}
    assert calls("from dspark_cli.config import typed\ntyped.plain(x)\n") == {"plain"}
    assert calls(f"import {TYPED} as t\nt.select(x, 'k')\n") == {"select"}
    assert calls(f"import {TYPED}\n{TYPED}.plain(x)\n") == {"plain"}
    # the stdlib's select and a method named plain are other functions
    assert calls("import select\nselect.select([], [], [], 0)\nx.plain()\n") == set()
    assert calls(f"from {TYPED} import plain\n") == set()  # imported, never called



def test_the_k8s_spec_reads_every_deploy_k8s_field() -> None:
    """`k8s_spec` names each `deploy.k8s` field (no dict in between): a field it left out would
    vanish silently from the manifests, so each one set here must come through."""
    cfg = compose_typed(["+hw=mi350x", "deploy=k8s"])
    given = {}
    for f in dataclasses.fields(K8sConf):
        value: object = {"kubernetes.io/os": f.name} if f.name == "node_selector" else (
            len(f.name) if f.type in (int, "int") else f"v-{f.name}")
        setattr(cfg.deploy.k8s, f.name, value)
        given[f.name] = value
    spec = k8s_spec(cfg)
    assert {name: getattr(spec, name) for name in given} == given
    assert (spec.platform, spec.model_path) == (str(cfg.hw.platform), cfg.model.path)
