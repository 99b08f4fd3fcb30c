"""The tests that assert one session run go to one xdist worker (`pytest --dist loadgroup`, as
`make test`'s slow part runs), so that run happens once: a session fixture is per worker, and
`cpu_validate_run` (tests/vllm_server.py) is ten minutes of real vLLM boots. (The fast part keeps
xdist's plain `--dist load`: measured, 234 s there against 273 s with this scheduler's one unit
of work per test.)

xdist's own `xdist_group` mark cannot do it with pytest 9.2: xdist rewrites a node id that
pytest no longer reads, and the tests are spread as if unmarked (pytest-xdist#1386). So each
worker writes, at collection, which of its tests ask for which shared run (`GROUPS_FILE` in the
session directory the workers share), and the controller's scheduler, xdist's LoadScope one,
makes each such set one unit of work; every other test is a unit of its own, as with
`--dist load`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

# The session fixtures whose tests must share a worker.
SHARED_RUNS = ("cpu_validate_run",)
GROUPS_FILE = "xdist-groups.json"


def groups_of(items: list[pytest.Item]) -> dict[str, str]:
    """Node id -> the shared run it asks for, for the items that ask for one."""
    return {item.nodeid: name for item in items for name in SHARED_RUNS
            if name in getattr(item, "fixturenames", ())}


def write_groups(path: Path, items: list[pytest.Item]) -> None:
    """Written whole by each worker (the same content), renamed into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".groups-")
    with os.fdopen(fd, "w") as f:
        json.dump(groups_of(items), f)
    os.replace(tmp, path)


def register(config: pytest.Config, path: Path) -> None:
    """The controller's part (its `pytest_configure`): the scheduler, where xdist runs."""
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(SharedRunPlugin(path))


def record(config: pytest.Config, items: list[pytest.Item], path: Path) -> None:
    """A worker's part (its `pytest_collection_modifyitems`) under `--dist loadgroup`."""
    if hasattr(config, "workerinput") and getattr(config.option, "loadgroup", False):
        write_groups(path, items)


class SharedRunScheduling(LoadScopeScheduling):
    """LoadScope with the scope of a node id its shared run's name, else the node id itself."""

    def __init__(self, config: pytest.Config, log: Any, path: Path) -> None:
        super().__init__(config, log)
        self._path = path
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # scheduling starts after every worker has collected
            try:
                self._groups = json.loads(self._path.read_text())
            except (OSError, ValueError) as e:  # said, not hidden: a shared run may run twice
                self.config.get_terminal_writer().line(
                    f"tests/worker_groups.py: no groups from the workers ({self._path}: {e}); "
                    "the tests of a shared session run may run it once per worker", yellow=True)
                self._groups = {}
        return self._groups.get(nodeid, nodeid)


class SharedRunPlugin:
    """Registered where xdist is (its hook exists only there)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config,
                                    log: Any) -> LoadScopeScheduling | None:
        if config.getvalue("dist") != "loadgroup":
            return None
        return SharedRunScheduling(config, log, self.path)
