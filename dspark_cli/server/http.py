"""One HTTP exchange with a server, bounded: every request dspark makes (`/health`, `/version`,
`/metrics`, the stall watch's reads, completions) goes through `exchange`, which gives up
after a total deadline and refuses a body over a size cap.

httpx's timeouts are per socket operation: a server that sends its headers and then a byte
every half second, or an endless `/metrics`, never trips them, and `response.text` would hold
all of it in memory. Here the body is streamed, its size and the clock checked after every
chunk; no single read waits longer than the deadline either, so an exchange ends within twice
its deadline whatever the server does. A redirect is not followed (the client's default): its
status is the answer.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a request is made: a dry run loads no HTTP stack
    import httpx

SMALL_BODY = 64 << 10  # /health, /version: a few bytes from vLLM
LARGE_BODY = 32 << 20  # /metrics (every engine's histograms), completions
# Headers of the streamed answer not carried into the returned one: its body is already
# decoded and whole.
_STREAM_HEADERS = {"content-encoding", "content-length", "transfer-encoding"}


def too_large(request: httpx.Request, limit: int) -> httpx.HTTPError:
    """The error of a body over `limit` bytes (an httpx error, so every caller's handling of
    a failed exchange covers it)."""
    import httpx

    return httpx.RemoteProtocolError(
        f"{request.url} answered more than {limit} bytes; not read further", request=request)


def exchange(client: httpx.Client, method: str, url: str, *, deadline_s: float,
             max_bytes: int = LARGE_BODY, connect_s: float | None = None,
             json: Any = None) -> httpx.Response:
    """`method url` through `client`, its whole answer read within `deadline_s` (else
    httpx.ReadTimeout) and at most `max_bytes` long (else an httpx error); a response whose
    body is already read. `connect_s` bounds the connection alone (at most the deadline)."""
    import httpx

    end = time.monotonic() + deadline_s
    timeout = httpx.Timeout(deadline_s, connect=min(connect_s or deadline_s, deadline_s))
    with client.stream(method, url, json=json, timeout=timeout) as response:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise too_large(response.request, max_bytes)
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > max_bytes:
                raise too_large(response.request, max_bytes)
            if time.monotonic() > end:
                raise httpx.ReadTimeout(f"{url} did not finish its answer within "
                                        f"{deadline_s:g} s", request=response.request)
        headers = [(k, v) for k, v in response.headers.multi_items()
                   if k.lower() not in _STREAM_HEADERS]
        return httpx.Response(response.status_code, headers=headers, content=bytes(body),
                              request=response.request)
