"""One HTTP exchange with a server, bounded: every request dspark makes (`/health`, `/version`,
`/metrics`, the stall watch's reads, completions) goes through `exchange`, which gives up
after a total deadline and refuses a body over a size cap.

httpx's timeouts are per socket operation: a server that sends its headers (or its headers
themselves) a byte every half second, or an endless `/metrics`, never trips them, and
`response.text` would hold all of it in memory. Here a timer cuts a connection the exchange
opened when its deadline passes (its socket is known from the moment it opens, through httpx's
`trace` extension), and the body is streamed, its size and the clock checked after every chunk
(which bounds a kept-alive connection's body too; such a connection's headers, from a server
that answered whole on it before, are bounded per read). A redirect is not followed (the
client's default): its status is the answer. `url_problem` says why a URL cannot be asked at
all (an attached server's `server.url`, checked as it starts).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a request is made: a dry run loads no HTTP stack
    import httpx

SMALL_BODY = 64 << 10  # /health, /version: a few bytes from vLLM
LARGE_BODY = 32 << 20  # /metrics (every engine's histograms), completions
# Headers of the streamed answer not carried into the returned one: its body is already
# decoded and whole.
_STREAM_HEADERS = {"content-encoding", "content-length", "transfer-encoding"}
_OPENED = ("connection.connect_tcp.complete", "connection.connect_unix_socket.complete")


class _Deadline:
    """Shuts the exchange's sockets down when `seconds` pass: a read blocked on them returns at
    once, whatever the server sends or withholds. Learns each socket through httpx's `trace`
    extension as the connection opens."""

    def __init__(self, seconds: float) -> None:
        self.passed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        stream = info.get("return_value") if event in _OPENED else None
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with self._lock:
                self._sockets.append(sock)
            if self.passed.is_set():
                self._cut()

    def _cut(self) -> None:
        self.passed.set()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


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

    timeout = httpx.Timeout(deadline_s, connect=min(connect_s or deadline_s, deadline_s))
    deadline = _Deadline(deadline_s)
    try:
        with client.stream(method, url, json=json, timeout=timeout,
                           extensions={"trace": deadline.trace}) as response:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise too_large(response.request, max_bytes)
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise too_large(response.request, max_bytes)
                if deadline.passed.is_set():
                    break
            if deadline.passed.is_set():  # a body cut (or still coming) at the deadline
                raise httpx.ReadTimeout("cut at the deadline", request=response.request)
            headers = [(k, v) for k, v in response.headers.multi_items()
                       if k.lower() not in _STREAM_HEADERS]
            return httpx.Response(response.status_code, headers=headers, content=bytes(body),
                                  request=response.request)
    except httpx.TransportError:
        if deadline.passed.is_set():
            raise httpx.ReadTimeout(f"{url} gave no whole answer within {deadline_s:g} s") \
                from None
        raise
    finally:
        deadline.cancel()


def url_problem(url: str) -> str | None:
    """Why `url` cannot be probed (not http(s), no host), or None."""
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as e:
        return str(e)
    if parsed.scheme not in ("http", "https"):
        return "it is not an http:// or https:// URL"
    return None if parsed.host else "it names no host"
