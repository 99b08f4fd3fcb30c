"""Every HTTP request dspark makes shares one TLS context (server/tls.py): httpx would otherwise
load the CA bundle on every call (57 ms of CPU per health poll here), and a thread loading one
while the process exits crashed OpenSSL's exit handlers (SIGSEGV after `dspark: cancelled.`)."""

from __future__ import annotations

import ast
import ssl
from pathlib import Path

from dspark_cli.server.tls import shared_context

PACKAGE = Path(__file__).resolve().parent.parent / "dspark_cli"
REQUESTS = {"get", "post", "put", "delete", "head", "request", "stream", "Client"}


def test_every_request_passes_the_shared_context() -> None:
    calls = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "httpx"
                    and node.func.attr in REQUESTS):
                verify = [k.value for k in node.keywords if k.arg == "verify"]
                shared = bool(verify) and isinstance(verify[0], ast.Call) and ast.unparse(
                    verify[0].func) == "shared_context"
                calls.append((f"{path.relative_to(PACKAGE)}:{node.lineno}", shared))
    assert len(calls) >= 6  # probe (2), metrics, the smoke's completion, the two bench probes
    assert [where for where, shared in calls if not shared] == []


def test_the_shared_context_is_one_and_verifies() -> None:
    context = shared_context()
    assert context is shared_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # the CA bundle is loaded
