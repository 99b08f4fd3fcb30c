"""A server dspark starts keeps vLLM's compile caches where a hand-started one keeps them: each
boot gets a private TMPDIR (vLLM's sockets), but torch Inductor's cache, whose default follows
TMPDIR, stays the user's, so a cold boot per bench cell recompiles nothing (on an H200, 179 s
against 70 s for the tiny model). Real processes that print what they were given."""

from __future__ import annotations

import getpass
import os
import sys
import tempfile
from pathlib import Path

from dspark_cli.server.deployment import LocalDeployment, NodeProcess
from dspark_cli.server.process import free_port
from tests.conftest import wait_until

PRINT_ENV = ("import os, time\n"
             "print('env', os.environ['TMPDIR'], os.environ['TORCHINDUCTOR_CACHE_DIR'],"
             " os.environ.get('HOME'), flush=True)\n"
             "time.sleep(600)\n")


def boot(tmp_path: Path, name: str, env: dict[str, str]) -> list[str]:
    """Start one node that prints its environment; its TMPDIR, Inductor cache and HOME."""
    log = tmp_path / f"{name}.log"
    port = free_port()
    deployment = LocalDeployment((NodeProcess(0, (sys.executable, "-c", PRINT_ENV), env, port),),
                                 "127.0.0.1", port, log, stop_grace_s=3.0)
    deployment.start()
    try:
        wait_until(lambda: log.is_file() and "env " in log.read_text(), 20, "the node's line")
    finally:
        deployment.stop()
    line = next(x for x in log.read_text().splitlines() if x.startswith("env "))
    return line.split()[1:]


def test_every_boot_shares_the_users_inductor_cache_and_home(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    first = boot(tmp_path, "a", env)
    second = boot(tmp_path, "b", env)
    assert first[0] != second[0], "each boot has its own private TMPDIR"
    assert not Path(first[0]).exists(), "and it is removed at stop"
    user = getpass.getuser()
    assert first[1] == second[1] == os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")
    assert not first[1].startswith(first[0])
    assert first[2] == second[2] == os.environ.get("HOME")


def test_a_cache_directory_the_user_set_is_kept(tmp_path: Path) -> None:
    mine = str(tmp_path / "my-inductor")
    assert boot(tmp_path, "a", {**os.environ, "TORCHINDUCTOR_CACHE_DIR": mine})[1] == mine
