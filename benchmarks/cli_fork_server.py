"""The tests' CLI runs (`run_dspark`) three ways, interleaved in the same run: a fresh
interpreter, a fork of tests/cli_server.py's server that has only imported Hydra and dspark
(`--cold`), and a fork of the server as the tests start it (`warm`: it has also composed the
embedded default once and built the k8s client's models and the shipped LWS CRD).

The mix is what the fast part runs most: plain dry runs, a two-node deploy=k8s render (its
manifests checked against the client's models and the CRD), a bench plan, and a usage error
(composed twice, through Hydra's app). Every run gets the same DSPARK_CACHE_DIR holding the
installed vLLM's option table (derived once at the start, as the suite's session does). Prints
each way's median per command and in all; exits 1 when the warm server is not faster than the
cold one.
Usage: .venv/bin/python benchmarks/cli_fork_server.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.cli_server import ForkServer  # noqa: E402

DIGEST = "registry.example/vllm@sha256:" + "a" * 64
MIX = {
    "serve cpu dry run": ["serve", "+hw=cpu", "--dry-run"],
    "serve mi350x 2 nodes": ["serve", "+hw=mi350x", "hw.nodes=2", "--dry-run", "--json"],
    "k8s render": ["serve", "+hw=mi350x", "hw.nodes=2", "deploy=k8s",
                   f"deploy.k8s.image={DIGEST}", "--dry-run"],
    "bench plan": ["bench", "+hw=cpu", "bench=cpu", "--dry-run"],
    "usage error": ["serve", "+hw=cpu", "hw.nodes=0"],
}
CLI = [sys.executable, "-m", "dspark_cli.cli"]


def fresh(args: list[str], env: dict[str, str], cwd: Path) -> int:
    return subprocess.run([*CLI, *args], cwd=cwd, env=env, capture_output=True,
                          timeout=120).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory(prefix="dsk-fork-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "DSPARK_CACHE_DIR": str(root / "cache"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                           os.environ.get("PYTHONPATH")]))}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # the suite writes bytecode (the Makefile)
        fresh(MIX["serve cpu dry run"], env, root)  # the option table, derived once
        servers = {name: ForkServer(root / f"{name}.sock", env, REPO, warmed=name == "warm")
                   for name in ("cold", "warm")}
        ways: dict[str, Callable[[list[str]], int]] = {
            "fresh interpreter": lambda a: fresh(a, env, root),
            **{f"fork, {name}": (lambda a, s=s: s.run([*CLI, *a], env, root, 120).returncode)
               for name, s in servers.items()},
        }
        codes: dict[tuple[str, str], int] = {}
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(rounds):  # interleaved, so drift hits every way alike
            for command, args in MIX.items():
                for way, run in ways.items():
                    start = time.perf_counter()
                    codes[way, command] = run(args)
                    times.setdefault((way, command), []).append(time.perf_counter() - start)
        for server in servers.values():
            server.close()
    for command in MIX:  # each way must give the same exit code
        if len({codes[way, command] for way in ways}) != 1:
            print(f"{command}: the ways disagree on the exit code", file=sys.stderr)
            return 1
    total = {}
    print(f"{'command':<22}" + "".join(f"{way:>20}" for way in ways))
    for command in MIX:
        medians = [statistics.median(times[way, command]) for way in ways]
        print(f"{command:<22}" + "".join(f"{m * 1000:>17.0f} ms" for m in medians))
    for way in ways:
        total[way] = sum(statistics.median(times[way, c]) for c in MIX)
    print(f"{'the mix':<22}" + "".join(f"{total[w] * 1000:>17.0f} ms" for w in ways))
    cold, warm = total["fork, cold"], total["fork, warm"]
    print(f"warm against cold: {100 * (cold - warm) / cold:.0f}% less wall time per run of the mix "
          f"({rounds} rounds)")
    return 0 if warm < cold else 1


if __name__ == "__main__":
    sys.exit(main())
