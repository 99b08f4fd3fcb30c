"""A fork server for the CLI: `run_dspark`'s real subprocess without the interpreter's start-up.

Half of a dry run is Python starting and importing Hydra, OmegaConf and dspark (~0.45 s of
~0.9 s). The server (one per test process, started on the first run) imports them once and
composes the embedded default's dry run once (`warm`: what Hydra and OmegaConf build lazily on a
process's first composition, and the shared schema's node, ~15% of a run), stays
single-threaded, and for every run forks a child that becomes `python -m dspark_cli.cli ARGS` in
the run's own cwd, environment and stdio (pipes the client made, passed over a Unix socket), with
its own exit status. Each child is a fork of the same server, so no run sees another's state
(Hydra's GlobalHydra, logging, os.environ, cwd). A run whose environment would change how the
interpreter itself starts (PYTHON*, locale) is not sent here: the client starts a fresh
interpreter for it.

Run as a script (`python tests/cli_server.py SOCKET [--cold]`, --cold: without `warm`, for
benchmarks/cli_fork_server.py), it serves until its stdin closes (the test process ended);
imported, `ForkServer` is the client.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import importlib.util
import json
import locale
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

# What a fresh interpreter reads at start-up, and what a preloaded module reads on import
# (kubernetes: KUBECONFIG): a run that changes one gets a fresh interpreter.
STARTUP_PREFIXES = ("PYTHON", "LC_")
STARTUP_KEYS = frozenset({"LANG", "LANGUAGE", "TZ", "KUBECONFIG"})
# What most runs import (a dry run's modules), none that reads the environment on import but by
# STARTUP_KEYS; nothing that imports vLLM, torch or matplotlib.
PRELOAD = ("hydra", "hydra.main", "hydra.compose", "hydra.initialize", "hydra._internal.hydra",
           "hydra._internal.utils", "hydra._internal.config_loader_impl", "omegaconf", "yaml",
           "dspark_cli.cli", "dspark_cli.hydra_app", "dspark_cli.config.overrides",
           "dspark_cli.config.override_keys", "dspark_cli.config.strict",
           "dspark_cli.launch.secrets", "dspark_cli.launch.secret_overrides",
           "dspark_cli.commands.serve", "dspark_cli.launch.plan", "dspark_cli.launch.render",
           "dspark_cli.deploy.targets")
# The k8s extra's client, which every deploy=k8s run imports (~1.2 s here): where installed.
PRELOAD_IF_INSTALLED = ("kubernetes", "kubernetes.client")
# A run imports these itself, in its own environment.
NEVER_PRELOADED = ("vllm", "torch", "matplotlib")


def startup_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) or k in STARTUP_KEYS}


# -- the server --------------------------------------------------------------------------------

def _serve(listener: socket.socket) -> tuple[dict, list[int]]:
    """Accept runs, fork one child each and report its pid and then its wait status; returns
    only in a child, with its request and its stdio."""
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin, selectors.EVENT_READ, "parent")
    while True:
        for key, _ in sel.select():
            if key.data == "parent":  # the test process is gone
                sys.exit(0)
            if key.data == "accept":
                conn, _ = listener.accept()
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                pid = os.fork()
                if pid == 0:  # none of the server's sockets and pidfds stay open in a run
                    waiting = [k for k in sel.get_map().values() if isinstance(k.data, tuple)]
                    sel.close()
                    for k in waiting:
                        k.data[0].close()
                        os.close(k.fd)
                    listener.close()
                    conn.close()
                    return json.loads(msg), fds
                for fd in fds:
                    os.close(fd)
                conn.send(json.dumps({"pid": pid}).encode())
                sel.register(os.pidfd_open(pid), selectors.EVENT_READ, (conn, pid))
            else:
                conn, pid = key.data
                sel.unregister(key.fileobj)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                conn.send(json.dumps({"status": status}).encode())
                conn.close()


def _become(request: dict, fds: list[int]) -> None:
    """This child, as `python -m dspark_cli.cli` started in the run's cwd and environment."""
    stdin = os.open(os.devnull, os.O_RDONLY)
    for target, fd in enumerate([stdin, *fds]):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import tempfile

    tempfile.tempdir = None  # TMPDIR is read again
    sys.argv = ["-m", *request["args"]]
    sys.path[0] = os.getcwd()  # `python -m` puts its cwd first


def warm() -> None:
    """What runs build alike from the installed packages, built once: `dspark serve +hw=cpu
    --dry-run`'s composition, which leaves behind Hydra's
    plugin scan, its override parser and OmegaConf's caches, and the shared schema in Hydra's
    ConfigStore, which each run that composes it would put there unchanged (store_schema);
    Hydra's global state is cleared on the way out. Where the k8s extra is installed, also what
    every deploy=k8s run checks its manifests with: the client's model classes and quantity
    parser (imported lazily), and the shipped LWS CRD, parsed (cached). Writes nothing."""
    from hydra import compose, initialize_config_dir

    from dspark_cli.commands import serve
    from dspark_cli.hydra_app import hydra_settings, register_schemas
    from dspark_cli.paths import conf_dir

    settings = hydra_settings("serve", argparse.Namespace(dry_run=True))
    register_schemas(serve)
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        compose("serve", overrides=[*settings, "+hw=cpu"])
    if importlib.util.find_spec(PRELOAD_IF_INSTALLED[0]) is not None:
        from dspark_cli.deploy import k8s_names, k8s_schema, lws_crd

        k8s_schema.problems([])
        k8s_names.quantity("1")
        lws_crd.validator()


def main() -> None:
    import runpy

    for name in PRELOAD:
        importlib.import_module(name)
    if importlib.util.find_spec(PRELOAD_IF_INSTALLED[0]) is not None:
        for name in PRELOAD_IF_INSTALLED:
            importlib.import_module(name)
    if "--cold" not in sys.argv[2:]:
        warm()
    if threading.active_count() != 1:
        raise SystemExit("cli_server: the preload started a thread; a fork would not have it")
    # What the CLI module imports stays; the module itself is run as `__main__`, as `-m` does.
    del sys.modules["dspark_cli.cli"], sys.modules["dspark_cli"].cli
    preloaded = sorted(set(NEVER_PRELOADED) & set(sys.modules))
    if preloaded:
        raise SystemExit(f"cli_server: the preload imported {preloaded}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(sys.argv[1])
    listener.listen(8)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    request, fds = _serve(listener)
    _become(request, fds)
    # From here the interpreter does what `python -m` does: SystemExit's code, a traceback for
    # anything uncaught, the threads joined, atexit run, stdio flushed.
    runpy._run_module_as_main("dspark_cli.cli")  # type: ignore[attr-defined]


# -- the client --------------------------------------------------------------------------------

def _text(data: bytes) -> str:
    """As `text=True` decodes a child's output: the locale's encoding, universal newlines."""
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


class ForkServer:
    """One server process and the startup environment it was started with."""

    def __init__(self, sock: Path, env: Mapping[str, str], cwd: Path, warmed: bool = True
                 ) -> None:
        self.sock, self.startup = sock, startup_env(env)
        argv = [sys.executable, __file__, str(sock), *([] if warmed else ["--cold"])]
        self.proc = subprocess.Popen(argv, cwd=cwd,
                                     env=dict(env), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline() != "ready\n":
            raise RuntimeError(f"the CLI fork server did not start (exit {self.proc.wait()})")
        atexit.register(self.close)  # waited for, so its runs count in the session's rusage

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether a run in `env` would start the interpreter as the server was started."""
        return self.proc.poll() is None and startup_env(env) == self.startup

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)

    def run(self, argv: list[str], env: Mapping[str, str], cwd: Path,
            timeout: float) -> subprocess.CompletedProcess[str]:
        """As `subprocess.run(argv, capture_output=True, text=True, ...)` would (argv is
        `python -m dspark_cli.cli ARGS`); TimeoutExpired after killing the run."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        request = {"args": argv[3:], "env": dict(env), "cwd": str(cwd)}
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
            conn.connect(str(self.sock))
            socket.send_fds(conn, [json.dumps(request).encode()], [out_w, err_w])
            os.close(out_w)
            os.close(err_w)
            pid = json.loads(conn.recv(1 << 16))["pid"]
            chunks, status = self._collect(conn, {out_r: [], err_r: []}, pid, timeout)
        out, err = (_text(b"".join(chunks[fd])) for fd in (out_r, err_r))
        if status is None:
            raise subprocess.TimeoutExpired(argv, timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(argv, os.waitstatus_to_exitcode(status), out, err)

    @staticmethod
    def _collect(conn: socket.socket, chunks: dict[int, list[bytes]], pid: int,
                 timeout: float) -> tuple[dict[int, list[bytes]], int | None]:
        """Both pipes to their end and the wait status; None as the status after a timeout."""
        deadline, status, timed_out = time.monotonic() + timeout, None, False
        sel = selectors.DefaultSelector()
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        sel.register(conn, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0 and not timed_out:
                timed_out = True
                os.kill(pid, signal.SIGKILL)  # as subprocess.run does, then reads what is left
            for key, _ in sel.select(None if timed_out else max(left, 0)):
                if key.fileobj is conn:
                    status = json.loads(conn.recv(1 << 16))["status"]
                    sel.unregister(conn)
                    continue
                data = os.read(key.fd, 1 << 16)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
        return chunks, None if timed_out else status


# The test process's server, by pid (here, not in conftest, which pytest imports twice).
SERVERS: dict[int, ForkServer] = {}

if __name__ == "__main__":
    main()
