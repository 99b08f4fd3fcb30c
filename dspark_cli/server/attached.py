"""A server that already runs (`server.url=URL`) as a `Deployment`: nothing to start or stop,
its URL checked before anything waits on it, its log (`server.log=FILE`) watched when given."""

from __future__ import annotations

from pathlib import Path

from dspark_cli.errors import UsageError
from dspark_cli.server import probe
from dspark_cli.server.deployment import Deployment


class AttachedServer(Deployment):
    """Not ours: `stop()` leaves it running and gives no teardown."""

    managed = False

    def __init__(self, url: str, log_path: Path | None = None) -> None:
        self.planned_url, self.log_path = url, log_path

    def start(self) -> None:
        if problem := probe.url_problem(self.planned_url):
            raise UsageError(f"server.url={self.planned_url!r} cannot be attached to: "
                             f"{problem}.", hint="give the running server's URL, e.g. "
                             "http://127.0.0.1:8000")

    def base_url(self) -> str:
        return self.planned_url

    def ended(self) -> str | None:
        return None

    def describe(self) -> str:
        return f"the server at {self.planned_url}"

    def stop(self) -> None:
        return None
