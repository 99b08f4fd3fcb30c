"""Ports claimed per job on one host: two claims never get the same port, a port something
listens on is skipped, and a claim is free again once its holder ends (even by SIGKILL)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_cli.errors import ServerError
from dspark_cli.server.process import claimed_port, free_port
from tests.conftest import REPO, wait_until


def test_two_claims_get_two_ports_and_a_listener_is_skipped():
    first = free_port()
    with claimed_port("127.0.0.1", first) as a, claimed_port("127.0.0.1", first) as b:
        assert a == first and b > a
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with claimed_port("127.0.0.1", port) as c:
            assert c != port
    with claimed_port("127.0.0.1", first) as again:
        assert again == first  # released at the end of the block


def test_a_killed_holder_releases_its_port(tmp_path):
    first = free_port()
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import pathlib, time\n"
        "from dspark_cli.server.process import claimed_port\n"
        f"with claimed_port('127.0.0.1', {first}) as p:\n"
        f"    pathlib.Path({str(ready)!r}).write_text(str(p))\n"
        "    time.sleep(600)\n")], cwd=REPO)
    try:
        wait_until(ready.exists, 30, "the holder to claim its port")
        with claimed_port("127.0.0.1", first) as other:
            assert other != first
    finally:
        holder.kill()
        holder.wait(10)
    with claimed_port("127.0.0.1", first) as mine:
        assert mine == first


def test_all_ports_taken_is_a_clear_error():
    first = free_port()
    with (claimed_port("127.0.0.1", first, span=1),
          pytest.raises(ServerError, match="held"),
          claimed_port("127.0.0.1", first, span=1)):
        pass


def test_blocks_of_ports_never_overlap():
    first = free_port()
    with (claimed_port("127.0.0.1", first, width=2) as a,
          claimed_port("127.0.0.1", first, width=2) as b):
        assert a == first and b == first + 2
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with claimed_port("127.0.0.1", port - 1, width=2) as c:
            assert c == port + 1  # the block port-1..port holds a listener


def test_free_port_is_below_the_kernels_ephemeral_range_and_free():
    start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(10000 <= p < start for p in ports), ports
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # nobody holds it
