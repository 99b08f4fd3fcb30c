"""The one TLS context that every HTTP request dspark makes shares (health polls, /metrics,
probes, the smoke's completions), passed to httpx as `verify=`.

Without it httpx builds a context per call and loads the CA bundle each time: 57 ms of CPU per
health poll here against 2 ms with the shared one (benchmarks/http_polls.py), paid by every poll
of a boot (one every 0.1 s). And a thread still loading a bundle while the process exits crashes in
OpenSSL's exit handlers (seen as SIGSEGV after `dspark: cancelled.`, in the lowest-versions
lane); the shared context is built once, by the first request (a start's first health poll).
"""

from __future__ import annotations

import ssl
import threading

_LOCK = threading.Lock()
_CONTEXT: list[ssl.SSLContext] = []


def shared_context() -> ssl.SSLContext:
    """httpx's default verifying context (its CA bundle, SSL_CERT_FILE and SSL_CERT_DIR when
    set), built once per process."""
    with _LOCK:
        if not _CONTEXT:
            import httpx

            _CONTEXT.append(httpx.create_ssl_context())
        return _CONTEXT[0]
