"""vLLM's option table: the installed vLLM's `vllm serve` options, derived from its own
argument parser, as the table dspark plans with; and what dspark reads of vLLM's source.

`python -m dspark_cli.vllm.options` prints the table as JSON: dspark runs it in a subprocess
(`derive`), once per vLLM version and commit, so vLLM's import (seconds) and its side effects
stay out of dspark. `--shipped` rewrites the table shipped for machines without vLLM
(`dspark_cli/launch/vllm_serve_options.json`). The table lets planning (which never imports
vLLM) resolve a free-form key exactly as vLLM's parser would: aliases, `--no-` forms,
abbreviations, and each option's type. A table read back (the cache may be shared, the shipped
file edited) is data only: `checked` holds it to the format below before anything uses it.

The table is kept per vLLM distribution, version and commit in
`$DSPARK_CACHE_DIR/vllm-options/` (default `~/.cache/dspark/`). An entry is JSON data, never
code: it is read only when it is a regular file of this user's that no one else may write
(through the one strict JSON parser, `untrusted.parse_json`), and it holds the identity it was
derived for and a table in the format `checked` enforces. Anything else (absent, corrupt,
foreign, planted, a FIFO, of another vLLM) is derived again and replaced, with one line on
stderr when it was there but refused. Writes are atomic (a reader sees the old entry or the new
one), and a miss is derived under a lock, so runs started together on a fresh machine (a test
session's workers) derive it once. DSPARK_NO_CACHE=1 reads and writes nothing: every plan
derives the table.

`has_field`: which `--speculative-config` keys the installed vLLM has, read from its source
(never imported): `SpeculativeConfig`'s fields in vllm/config/speculative.py. `serve_cli_args`:
where the installed vLLM keeps `vllm serve`'s argument parser (`make_arg_parser`,
`validate_parsed_serve_args`): `vllm.entrypoints.launchers.cli_args` in vLLM 0.32,
`vllm.entrypoints.openai.cli_args` in vLLM 0.26 (the H200 image's); imported only inside the
helpers' subprocesses.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib
import importlib.metadata as metadata
import importlib.util
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from dspark_cli.errors import UsageError
from dspark_cli.untrusted import parse_json, shown_path
from dspark_cli.vllm.shim import installed_vllm, patch_version_lookup

SHIPPED = Path(__file__).resolve().parents[1] / "launch" / "vllm_serve_options.json"
FORMAT = 1  # of an entry: {"format", "vllm": {dist, version, commit}, "options": {dest: ...}}
KINDS = ("bool", "flag", "value", "list")
TYPES = ("int", "float", "human_int", "int_or_auto", "str")
_TYPES = {"int": "int", "float": "float", "human_readable_int": "human_int",
          "human_readable_int_or_auto": "int_or_auto"}
DERIVE_TIMEOUT_S = 180.0  # importing vLLM's parser: 5-8 s on 2 idle cores, more under load


class DeriveError(Exception):
    """The installed vLLM's parser could not be read (`importable`: False when vLLM or torch
    cannot even be imported here)."""

    def __init__(self, message: str, importable: bool = True) -> None:
        super().__init__(message)
        self.importable = importable


def _type_name(kind: Any) -> str:
    """The option's value type; vLLM's `_optional_type(int)` wrapper is unwrapped."""
    name = getattr(kind, "__name__", None)
    if name == "_optional_type" and getattr(kind, "__closure__", None):
        inner = [c.cell_contents for c in kind.__closure__]
        name = getattr(inner[0], "__name__", None) if inner else name
    return _TYPES.get(str(name), "str")


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse.BooleanOptionalAction):
        return "bool"
    if action.nargs == 0:
        return "flag"
    return "list" if action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction) \
        else "value"


def dump() -> dict[str, dict[str, Any]]:
    """{dest: {flags, kind, type, choices}} for every option of `vllm serve` (imports vLLM)."""
    patch_version_lookup()
    from vllm.utils.argparse_utils import FlexibleArgumentParser


    parser = serve_cli_args().make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    table: dict[str, dict] = {}
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        choices = ([c for c in action.choices if c is not None]
                   if action.choices is not None else None)
        entry = table.setdefault(action.dest, {"flags": [], "kind": _kind(action),
                                               "type": _type_name(action.type),
                                               "choices": choices})
        entry["flags"] += [s for s in action.option_strings if s not in entry["flags"]]
    return dict(sorted(table.items()))


def checked(data: object) -> dict[str, dict[str, Any]]:
    """An entry's options, held to the format; ValueError names the first thing wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError("not an option table of this format")
    options = data.get("options")
    if not isinstance(options, dict) or not options:
        raise ValueError("no options")
    for dest, entry in options.items():
        if not (isinstance(dest, str) and dest.isidentifier() and isinstance(entry, dict)):
            raise ValueError(f"bad option {dest!r}")
        flags, choices = entry.get("flags"), entry.get("choices")
        if not (isinstance(flags, list) and flags and all(
                isinstance(f, str) and re.fullmatch(r"--?[A-Za-z0-9][A-Za-z0-9_.-]*", f)
                for f in flags) and flags[0].startswith("--")):
            raise ValueError(f"{dest}: bad flags")
        if entry.get("kind") not in KINDS or entry.get("type") not in TYPES:
            raise ValueError(f"{dest}: bad kind or type")
        if choices is not None and not (isinstance(choices, list) and all(
                isinstance(c, str | int | float) for c in choices)):
            raise ValueError(f"{dest}: bad choices")
        if set(entry) != {"flags", "kind", "type", "choices"}:
            raise ValueError(f"{dest}: unknown fields")
    return options


def entry(vllm: dict[str, str | None], options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"format": FORMAT, "vllm": vllm, "options": options}


def derive(timeout: float = DERIVE_TIMEOUT_S) -> dict[str, dict[str, Any]]:
    """The installed vLLM's options, from its parser in a subprocess; DeriveError if not."""
    # Its own TMPDIR, removed after: importing vLLM leaves torch's caches there
    # (torchinductor_<user>), and the user's TMPDIR is not dspark's to fill.
    with tempfile.TemporaryDirectory(prefix="dspark-options-") as scratch:
        env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "TMPDIR": scratch}
        try:
            done = subprocess.run([sys.executable, "-m", "dspark_cli.vllm.options"],
                                  capture_output=True, text=True, timeout=timeout, env=env,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise DeriveError(f"reading its parser took over {timeout:.0f} s") from e
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "import_error" in answer:
        raise DeriveError(f"it cannot be imported ({answer['import_error']})", importable=False)
    if done.returncode != 0 or not isinstance(answer, dict):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DeriveError(f"reading its parser failed (exit {done.returncode}: {tail})")
    try:
        return checked(entry({}, answer))
    except ValueError as e:
        raise DeriveError(f"its parser gave no usable table ({e})") from e


def _main() -> int:
    try:
        options = dump()
    except ModuleNotFoundError as e:  # vLLM or torch is not installed (or broken) here
        print("\n" + json.dumps({"import_error": str(e)}))
        return 0
    if sys.argv[1:] == ["--shipped"]:  # written from a release wheel: no commit of its own
        dist = installed_vllm() or "vllm"
        identity = {"dist": dist, "version": metadata.version(dist), "commit": None}
        SHIPPED.write_text(json.dumps(entry(identity, options), indent=1, sort_keys=True)
                           + "\n")
        print(f"wrote {SHIPPED}", file=sys.stderr)
        return 0
    sys.stdout.flush()
    print("\n" + json.dumps(options))
    return 0


Identity = dict[str, str | None]  # {"dist", "version", "commit"} of the installed vLLM
_MAX_ENTRY = 4 << 20  # bytes of one entry (a table is about 100 KB)


def cache_dir() -> Path:
    root = os.environ.get("DSPARK_CACHE_DIR") or Path.home() / ".cache" / "dspark"
    return Path(root) / "vllm-options"


def cache_enabled() -> bool:
    return os.environ.get("DSPARK_NO_CACHE", "") in ("", "0")


def entry_path(identity: Identity) -> Path:
    """`<dist>-<version>-<commit>.json`, every character outside [A-Za-z0-9.+-] as `_`."""
    parts = [str(identity.get(k) or "none") for k in ("dist", "version", "commit")]
    return cache_dir() / (re.sub(r"[^A-Za-z0-9.+-]", "_", "-".join(parts))[:200] + ".json")


_warned: set[Path] = set()


def _refused(path: Path, why: str) -> None:
    """Say once per entry and process why a cached entry was not used (it is derived again
    and replaced): a planted or corrupt entry costs a derivation, never a plan."""
    if path not in _warned:
        _warned.add(path)
        print(f"dspark: the vLLM option-table cache entry {shown_path(path)} {why}: refused, "
              "derived again from the installed vLLM", file=sys.stderr)


def load(path: Path, identity: Identity) -> dict[str, dict[str, Any]] | None:
    """The entry's options, or None unless it is a trusted entry for exactly `identity`: a
    regular file of this user's that no one else may write (a FIFO, a link or a directory at
    its name is refused without being opened for a blocking read), bounded, strict JSON no
    deeper than `untrusted.MAX_DEPTH`, in the table's format."""
    try:
        st = os.lstat(path)
    except OSError:  # absent
        return None
    if not stat.S_ISREG(st.st_mode):
        _refused(path, "is not a regular file (a link, a FIFO, a directory or a device)")
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # swapped for a link since
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o022 or (
                hasattr(os, "getuid") and st.st_uid != os.getuid()):
            _refused(path, "is not a regular file of this user's that only they can write")
            return None
        raw = f.read(_MAX_ENTRY + 1)
    try:
        if len(raw) > _MAX_ENTRY:
            raise ValueError(f"larger than {_MAX_ENTRY} bytes")
        data = parse_json(raw.decode("utf-8"), path)
        options = checked(data)
    except (UsageError, ValueError, TypeError) as e:
        _refused(path, f"is corrupt ({getattr(e, 'field', None) or type(e).__name__})")
        return None
    return options if data.get("vllm") == identity else None


def store(path: Path, identity: Identity, options: dict[str, dict[str, Any]]) -> None:
    """Write the entry atomically; a cache that cannot be written is only a slower plan."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entry(identity, options), f, sort_keys=True)
        os.replace(tmp, path)  # replaces a planted link itself, never its target
    except OSError:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def _deriving(path: Path) -> Iterator[None]:
    """Held while `path` is derived: one process derives, the others wait and read its entry.
    A lock that cannot be taken (a read-only cache) only lets two derive at once."""
    fd = None
    with contextlib.suppress(OSError):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path.parent / ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                     0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def installed_options(identity: Identity) -> dict[str, dict[str, Any]]:
    """The installed vLLM's options: the cached entry, else derived (seconds) and cached.
    Raises DeriveError when its parser cannot be read."""
    if not cache_enabled():
        return derive()
    path = entry_path(identity)
    options = load(path, identity)
    if options is None:
        with _deriving(path):
            options = load(path, identity)  # another run may have derived it meanwhile
            if options is None:
                options = derive()
                store(path, identity, options)
    return options


def has_field(name: str) -> bool:
    """Whether the installed vLLM's SpeculativeConfig declares `name`; False without vLLM."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):  # an import hook that refuses it: not installed here
        return False
    for root in (spec.submodule_search_locations or []) if spec else []:
        source = Path(root) / "config" / "speculative.py"
        if source.is_file():
            text = source.read_text(encoding="utf-8", errors="replace")
            return re.search(rf"^    {re.escape(name)}\s*:", text, re.MULTILINE) is not None
    return False


MODULES = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")


def serve_cli_args() -> ModuleType:
    """The installed vLLM's serve argument module, the newest place first; ModuleNotFoundError
    (that of the newest place) when neither is there."""
    first: ModuleNotFoundError | None = None
    for name in MODULES:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:
            # Only the module itself missing moves on; a dependency it lacks (torch) is the
            # answer.
            if e.name is None or not name.startswith(e.name):
                raise
            first = first or e
    assert first is not None
    raise first


if __name__ == "__main__":
    sys.exit(_main())
