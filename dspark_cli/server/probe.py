"""Short HTTP probes of a vLLM server through its session's client, each with its own timeout:
a hung server never hangs dspark."""

from __future__ import annotations

import httpx

PROBE_TIMEOUT_S = 2.0


def healthy(client: httpx.Client, base_url: str) -> bool:
    """Whether `/health` answers 200 right now."""
    return health(client, base_url) == 200


# `health()` when no connection could be made: nothing listens there, or the host is unknown
# or unreachable.
REFUSED = -1


def health(client: httpx.Client, base_url: str) -> int | None:
    """`/health`'s status code now; REFUSED when no connection could be made, None when a
    connection was made but gave no answer in time."""
    try:
        return client.get(base_url + "/health", timeout=PROBE_TIMEOUT_S).status_code
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return REFUSED
    except httpx.HTTPError:
        return None


def url_problem(url: str) -> str | None:
    """Why `url` cannot be probed (not http(s), no host), or None."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as e:
        return str(e)
    if parsed.scheme not in ("http", "https"):
        return "it is not an http:// or https:// URL"
    return None if parsed.host else "it names no host"


def version(client: httpx.Client, base_url: str) -> str | None:
    """The server's `/version`, or None when it does not say."""
    try:
        return str(client.get(base_url + "/version", timeout=PROBE_TIMEOUT_S).json()["version"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None
