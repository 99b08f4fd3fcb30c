"""What a health poll costs dspark: `probe.health()` (every request sharing server/tls.py's one
TLS context) against the same GET as httpx makes it by default (a new context per call, the CA
bundle loaded each time), in the same run, on the same server.

    .venv/bin/python benchmarks/http_polls.py [--polls 200] [--rounds 3]

The server is tests/doubles/fake_vllm.py (real HTTP on localhost). The figure is this process's
CPU time per poll (user + system), which a boot's health polls take from the cores the booting
server needs; each round runs both ways, alternating which goes first.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from dspark_cli.server.probe import PROBE_TIMEOUT_S, health  # noqa: E402
from dspark_cli.server.process import free_port  # noqa: E402


def default_get(base_url: str) -> int:
    return httpx.get(base_url + "/health", timeout=PROBE_TIMEOUT_S).status_code


def cpu_ms_per_poll(poll: Callable[[str], int | None], base_url: str, polls: int) -> float:
    start = time.process_time()
    for _ in range(polls):
        if poll(base_url) != 200:
            sys.exit("the fake server did not answer 200")
    return (time.process_time() - start) / polls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, str(REPO / "tests/doubles/fake_vllm.py"),
                               "--port", str(port)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while health(base_url) != 200:
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit("the fake server did not come up")
            time.sleep(0.1)
        ways = {"httpx default (a context per call)": default_get,
                "dspark probe (one shared context)": health}
        ms: dict[str, list[float]] = {w: [] for w in ways}
        for r in range(args.rounds):
            for way in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                ms[way].append(cpu_ms_per_poll(ways[way], base_url, args.polls))
            print(f"round {r + 1}: " + ", ".join(f"{w} {ms[w][-1]:.2f} ms" for w in ways))
    finally:
        server.terminate()
        server.wait()
    (default, shared) = (statistics.median(ms[w]) for w in ways)
    print(f"median CPU per health poll: {default:.2f} ms with httpx's default, {shared:.2f} ms "
          f"shared ({shared / default - 1:+.0%}); {args.polls} polls per round")


if __name__ == "__main__":
    main()
