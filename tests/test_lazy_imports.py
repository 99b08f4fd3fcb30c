"""Imports at the top: an import inside a function is one of the few kept lazy on purpose (a
heavy or optional third-party package, or the live server session, which a dry run must not
load), and a dry run of serve, smoke and bench loads neither httpx nor the server session.
Read from the source with `ast`, as written; the dry runs in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, dspark_env

PACKAGE = REPO / "dspark_cli"

# What an import inside a function may name (the module or a package above it), and why it
# waits there.
LAZY = {
    "hydra": "composing a config costs ~0.3 s; `--help`, usage errors and the readers need none",
    "omegaconf": "Hydra's config type: loaded with hydra, where a command composes",
    "httpx": "the HTTP stack (~0.1 s): only a live server is asked; a dry run asks none",
    "vllm": "seconds and import side effects: only in the helpers' own subprocesses",
    "torch": "seconds: only where the tiny model's weights are made",
    "transformers": "seconds: the tiny model's tokenizer and config only",
    "tokenizers": "the tiny model's tokenizer only",
    "safetensors": "the tiny model's and a checkpoint's tensors only",
    "matplotlib": "an optional extra (`plot`): the pictures only",
    "kubernetes": "an optional extra (`k8s`): the manifests' validation only",
    "jsonschema": "the LeaderWorkerSet CRD's validation only (the `k8s` extra)",
    "pydantic": "the `k8s` extra's model validation only",
    "lm_eval": "the `eval` extra, in its own venv: the accuracy stage's entry only",
    "numpy": "~0.1 s: a checkpoint's tensor values only",
    "pyarrow": "heavy: reading a parquet request set (`dspark prepare`) only",
    "yaml": "~20 ms: only where YAML is read or written",
    "rich": "the tables and progress bars: only when one is drawn",
    "prometheus_client": "the metrics parser: only where /metrics is read",
    "dspark_cli.server.session": "the live session (httpx, threads): a dry run must not load it",
    "dspark_cli.cli.pipeline": "the steps to a command's run: `dspark --help` reads the "
                               "registry only",
    "dspark_cli.cli.compose": "the steps Hydra takes part in (hydra, omegaconf at its top): "
                              "a command's --help, report, compare and prepare need none",
    "this": "stdlib, but prints the Zen of Python when imported: the tiny model's text, caught",
}


def _allowed(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in LAZY)


def in_function_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import statement inside a function (or lambda) of `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    found += [(inner.lineno, a.name) for a in inner.names]
                elif isinstance(inner, ast.ImportFrom):
                    found.append((inner.lineno, "." * inner.level + (inner.module or "")))
    return sorted(set(found))


def test_imports_inside_functions_are_only_the_lazy_ones() -> None:
    wrong, kept = [], 0
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, name in in_function_imports(path.read_text()):
            if _allowed(name):
                kept += 1
            else:
                wrong.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert kept, "the walk found the lazy imports"
    assert wrong == [], "\n".join(wrong)


def test_an_import_inside_a_function_is_found() -> None:
    source = ("import os\n\ndef f():\n    import json\n    from dspark_cli import errors\n"
              "    return lambda: __import__('x')\n\nclass C:\n    def m(self):\n"
              "        from .sibling import x\n")
    found = in_function_imports(source)
    assert found == [(4, "json"), (5, "dspark_cli"), (10, ".sibling")]
    assert [n for _, n in found if not _allowed(n)] == ["json", "dspark_cli", ".sibling"]
    assert _allowed("httpx") and _allowed("hydra.core.config_store")
    assert not _allowed("httpxx") and not _allowed("dspark_cli.server")


# Each dry run in a fresh interpreter through `dspark_cli.cli:main` (the entry point), then
# what it left in sys.modules.
_PROBE = ("import sys\nfrom dspark_cli.cli import main\nrc = main(sys.argv[1:])\n"
          "print(rc, [m for m in ('httpx', 'dspark_cli.server.session') if m in sys.modules])")


@pytest.mark.parametrize("args", [
    ("serve", "+hw=mi350x", "--dry-run"),
    ("smoke", "+hw=mi350x", "--dry-run"),
    ("bench", "bench=cpu", "+hw=cpu", "--dry-run"),
], ids=["serve", "smoke", "bench"])
def test_a_dry_run_loads_neither_httpx_nor_the_server_session(tmp_path: Path,
                                                               args: tuple[str, ...]) -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True,
                          cwd=tmp_path, env=dspark_env(), timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stderr[-2000:]
