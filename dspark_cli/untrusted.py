"""Records read back are untrusted input: a run directory handed to `dspark report`, `compare`
or `bench --report`, and dspark's own cache, may have been edited, copied, truncated or planted.
Everything dspark reads back goes through the one reader here, and everything it writes beside
such records through the one writer.

Reading: a file is read only when it is a regular file (a FIFO, a device or a directory is
refused without being opened for blocking reads), reached without a link out of the directory
it was found under, of bounded size, decoded strictly as UTF-8, and (JSON, YAML) nested at most
`MAX_DEPTH` deep, with every number finite and within `MAX_MAGNITUDE` and every string free of
lone surrogates; each field a reader uses is then held to its kind (`check`: `"valid": "false"`
is no boolean). A directory is searched breadth-first, never below `MAX_WALK_DEPTH` levels nor
past `MAX_ENTRIES` entries, never through a link. A record that breaks a rule is a `RecordError`
(exit 2) naming the file and the field. Nothing read back is executed, put into a process's
environment, or used as an override.

Writing: `write_atomic` replaces a file at once (a temporary file in the same directory, then
`os.replace`): a reader sees the old file or the new one, and a link planted at its name (or at
a directory on its way below the output directory) is replaced or refused, never written
through. An output directory that is an existing file is a usage error (exit 2).

Showing: `printable` is the one control-character escape for record text shown to a person
(the terminal and report.md alike); secrets go through `launch.secrets` before it.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import stat
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dspark_cli.errors import UsageError

# What a field must be (said in the error as is).
BOOL = "a JSON boolean (true or false)"
INT = "an integer"
COUNT = "a non-negative integer"
NUMBER = "a finite number"
AMOUNT = "a finite non-negative number"
FRACTION = "a number from 0 to 1"
MARGIN = "a number from 0 up to (not including) 1"
TEXT = "a string"
MAP = "a JSON object"
LIST = "a list"
SCALAR = "a number, a string or a boolean"
SCALARS = "a number, a string, a boolean or a list of them"  # what a tool printed, kept as is
Spec = Mapping[str, str]  # dotted field ("checks.*.name": each item) -> kind

# Bounds on what is read back: far above anything dspark writes, far below what would cost
# time, memory or an overflow (two throughputs of 1e308 sum to infinity).
MAX_BYTES = 32 << 20  # a JSON or YAML record
MAX_TEXT_BYTES = 1 << 20  # a launch.sh, a job's outcome
MAX_DEPTH = 64  # nesting of a record's lists and objects
MAX_NODES = 2_000_000  # values in one record (YAML aliases expand to many)
MAX_MAGNITUDE = 1e18  # any number read back
MAX_WALK_DEPTH = 12  # directory levels searched below a given directory
MAX_ENTRIES = 200_000  # directory entries searched below a given directory


class RecordError(UsageError):
    """A record dspark cannot have written as it is: the file, the field and what is wrong."""

    def __init__(self, path: Path | str, field: str, problem: str) -> None:
        super().__init__(f"{shown_path(path)}: {field} {problem}; the record is malformed "
                         "(edited, truncated, planted, or not written by dspark), nothing was "
                         "written.", hint="restore the record from the run, or leave its run out")
        self.path, self.field = str(path), field


# -- paths --------------------------------------------------------------------------------------
def shown_path(path: Path | str) -> str:
    """A path as text that can be printed: bytes that are no UTF-8 (a name from another
    encoding, kept by Python as lone surrogates) shown as `\\xff`."""
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")


def text_path(path: Path) -> Path:
    """`path` when its name is UTF-8 text; UsageError (exit 2) naming it otherwise, since
    every record, report and terminal line that names it would have to misquote it."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{shown_path(path)}: the path is not UTF-8 text (a name in another "
                         "encoding); dspark names every file it reads in its records and "
                         "reports, and cannot name this one; nothing was written.",
                         hint="rename it to UTF-8 (convmv -f latin1 -t utf8 ...)") from None
    return path


def contained(path: Path, root: Path) -> Path:
    """`path` resolved; RecordError when it (or a link on its way) leads outside `root`."""
    text_path(path)
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as e:  # a loop of links, a name too long
        raise RecordError(path, "the path", f"cannot be resolved ({e})") from None
    if not real.is_relative_to(root.resolve()):
        raise RecordError(path, "the path", f"leads outside {shown_path(root)} (to "
                          f"{shown_path(real)}): refused")
    return text_path(real)


def walk(root: Path, names: Iterable[str]) -> dict[str, list[Path]]:
    """Every file named one of `names` under `root` (root's own included), breadth-first: no
    link to a directory followed, nothing below `MAX_WALK_DEPTH` levels, UsageError past
    `MAX_ENTRIES` entries. Links to files are returned (the reader decides on them)."""
    wanted = set(names)
    found: dict[str, list[Path]] = {n: [] for n in wanted}
    queue: deque[tuple[Path, int]] = deque([(root, 0)])
    seen = 0
    while queue:
        directory, depth = queue.popleft()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:  # unreadable, or gone: what is not there is not read
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                raise UsageError(f"{shown_path(root)} holds more than {MAX_ENTRIES} files and "
                                 "directories; give the run directory itself, not a folder "
                                 "above many runs.")
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir and depth < MAX_WALK_DEPTH:
                queue.append((Path(entry.path), depth + 1))
            elif not is_dir and entry.name in wanted:
                found[entry.name].append(Path(entry.path))
    return {n: sorted(ps) for n, ps in found.items()}


# -- reading ------------------------------------------------------------------------------------
def read_bytes(path: Path, root: Path, limit: int = MAX_BYTES) -> bytes | None:
    """The file's bytes (None when nothing is at `path`), read only if it is a regular file
    reached inside `root`, and at most `limit` bytes long."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise RecordError(path, "the path", f"cannot be read ({e.strerror})") from None
    real = contained(path, root)
    try:
        mode = os.stat(real).st_mode
    except OSError as e:  # a link to nothing
        raise RecordError(path, "the path", f"cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(mode):
        raise RecordError(path, "the path", "is not a regular file (a directory, a FIFO, a "
                          "socket or a device): refused unread")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise RecordError(path, "the file", f"cannot be read ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped since the check
            raise RecordError(path, "the path", "is not a regular file: refused")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise RecordError(path, "the file", f"is larger than {limit} bytes: refused")
    return data


def read_text(path: Path, root: Path, limit: int = MAX_TEXT_BYTES) -> str | None:
    """The file's text (None when there is none): `read_bytes`, then strict UTF-8."""
    data = read_bytes(path, root, limit)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordError(path, "the file", f"is not UTF-8 text ({e.reason} at byte "
                          f"{e.start})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:  # 1e400: JSON, no float
        raise ValueError(f"{text} is out of range (beyond {MAX_MAGNITUDE:g})")
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > 19:
        raise ValueError(f"{text[:24]}... is out of range (beyond {MAX_MAGNITUDE:g})")
    value = int(text)
    if abs(value) > MAX_MAGNITUDE:
        raise ValueError(f"{text} is out of range (beyond {MAX_MAGNITUDE:g})")
    return value


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def vet(data: Any, path: Path | str) -> Any:
    """`data` (a parsed record) when every value in it is plain data a report can show:
    nesting at most `MAX_DEPTH`, at most `MAX_NODES` values, finite numbers within
    `MAX_MAGNITUDE`, text without lone surrogates, keys that are text or numbers."""
    stack: list[tuple[Any, int, str]] = [(data, 0, "")]
    nodes = 0
    while stack:
        node, depth, where = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise RecordError(path, "the record", f"holds more than {MAX_NODES} values")
        if isinstance(node, str):
            if _SURROGATE.search(node):
                raise RecordError(path, where or "the record", "holds a lone surrogate "
                                  "(\\ud800-\\udfff), which is no text")
        elif isinstance(node, bool) or node is None:
            pass
        elif isinstance(node, int | float):
            if not math.isfinite(node) or abs(node) > MAX_MAGNITUDE:
                raise RecordError(path, where or "the record",
                                  f"is {node!r}, out of range (beyond {MAX_MAGNITUDE:g})")
        elif isinstance(node, dict | list):
            if depth >= MAX_DEPTH:
                raise RecordError(path, "the record", f"is nested deeper than {MAX_DEPTH}")
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, value in items:
                if isinstance(node, dict):
                    if not isinstance(key, str | int | float) or isinstance(key, bool):
                        raise RecordError(path, where or "the record",
                                          f"has a key {key!r} that is no text")
                    stack.append((key, depth + 1, where))
                stack.append((value, depth + 1, f"{where}.{key}" if where else str(key)))
        else:  # a date, a set, binary: YAML can make them, dspark writes none
            raise RecordError(path, where or "the record",
                              f"holds a {type(node).__name__}, which dspark never writes")
    return data


def parse_json(text: str, path: Path | str) -> Any:
    """Strict JSON (no NaN, Infinity, or number out of range), vetted (`vet`)."""
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_float,
                          parse_int=_int)
    except RecursionError:
        raise RecordError(path, "the record", f"is nested deeper than {MAX_DEPTH}") from None
    except ValueError as e:
        raise RecordError(path, "the file", f"is not valid JSON ({e})") from None
    return vet(data, path)


def load_json(path: Path, root: Path, limit: int = MAX_BYTES) -> Any:
    """A JSON record inside `root` (None when there is none); RecordError when unreadable."""
    text = read_text(path, root, limit)
    return None if text is None else parse_json(text, path)


def load_yaml(path: Path, root: Path, limit: int = MAX_BYTES) -> Any:
    """A YAML record inside `root` (None when there is none), safe-loaded and vetted."""
    import yaml

    text = read_text(path, root, limit)
    if text is None:
        return None
    try:
        # libyaml's loader where installed: a resolved config.yaml is hundreds of lines.
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except RecursionError:
        raise RecordError(path, "the record", f"is nested deeper than {MAX_DEPTH}") from None
    except (yaml.YAMLError, ValueError, TypeError) as e:
        raise RecordError(path, "the file", f"is not valid YAML ({_one_line(e)})") from None
    return vet(data, path)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


def _is(value: Any, kind: str) -> bool:
    if kind == BOOL:
        return isinstance(value, bool)
    if kind in (INT, COUNT):
        return (isinstance(value, int) and not isinstance(value, bool)
                and (kind == INT or value >= 0))
    if kind in (NUMBER, AMOUNT, FRACTION, MARGIN):
        return (isinstance(value, int | float) and not isinstance(value, bool)
                and math.isfinite(value) and (kind == NUMBER or value >= 0)
                and (kind != FRACTION or value <= 1) and (kind != MARGIN or value < 1))
    if kind == SCALARS and isinstance(value, list):
        return all(_is(v, SCALAR) for v in value)
    if kind in (SCALAR, SCALARS):
        return isinstance(value, str | bool) or _is(value, NUMBER)
    return isinstance(value, {TEXT: str, MAP: dict, LIST: list}[kind])


def _at(node: Any, steps: Sequence[str], where: str,
        listed: bool = False) -> Iterator[tuple[str, Any, bool]]:
    """(field, value, whether it is a list's item) at each place `steps` reaches; missing
    places give None."""
    if not steps:
        yield where, node, listed
        return
    step, rest = steps[0], steps[1:]
    if node is None:
        return
    if step == "*":
        items = (node.items() if isinstance(node, dict) else enumerate(node)
                 if isinstance(node, list) else ())
        for key, value in items:
            yield from _at(value, rest, f"{where}[{key!r}]" if where else f"[{key!r}]",
                           isinstance(node, list))
        return
    if isinstance(node, dict):
        yield from _at(node.get(step), rest, f"{where}.{step}" if where else step)


def check(record: Any, path: Path | str, spec: Spec, required: Sequence[str] = ()) -> None:
    """RecordError unless `record` is a JSON object whose fields in `spec` have their kinds
    (absent or null is allowed, except for the `required` ones, in each object their parent
    path reaches: require the parent too where it must be there; a list's item is never
    null: it has no default to stand for)."""
    if not isinstance(record, dict):
        raise RecordError(path, "the record", f"must be {MAP}")
    for dotted in required:  # wherever its parent is (`checks.*.name`: in each check)
        parent, _, last = dotted.rpartition(".")
        places = _at(record, parent.split("."), "") if parent else [("", record, False)]
        for where, node, _ in places:
            if last == "*":  # every element: `protocol.arms.*` holds no null
                for field, value, _ in _at(node, ["*"], where):
                    if value is None:
                        raise RecordError(path, field, "is missing")
            elif isinstance(node, dict) and node.get(last) is None:
                raise RecordError(path, f"{where}.{last}" if where else last, "is missing")
    for dotted, kind in spec.items():
        for where, value, listed in _at(record, dotted.split("."), ""):
            if value is None and listed:
                raise RecordError(path, where, f"must be {kind}, not null")
            if value is not None and not _is(value, kind):
                shown = printable(json.dumps(value, default=str))
                shown = shown if len(shown) <= 40 else shown[:37] + "..."
                raise RecordError(path, where, f"must be {kind}, not {shown}")


def without_nulls(record: Any) -> Any:
    """`record` with every null member of an object left out, so that a reader's default
    stands for it (`.get(key, default)`); lists are kept as they are (`check` refuses a null
    item where a spec reaches)."""
    if isinstance(record, dict):
        return {k: without_nulls(v) for k, v in record.items() if v is not None}
    if isinstance(record, list):
        return [without_nulls(v) for v in record]
    return record


def load_record(path: Path, root: Path, spec: Spec, required: Sequence[str] = ()) -> Any:
    """A JSON record inside `root`, held to its spec, a null member read as its default
    (`without_nulls`; None when there is none)."""
    data = load_json(path, root)
    if data is not None:
        check(data, path, spec, required)
    return without_nulls(data)


# -- showing ------------------------------------------------------------------------------------
# C0 and C1 controls (a line break only where kept), DEL, and the format characters that
# reorder or hide text on a terminal (bidirectional overrides and isolates, zero-width marks).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e"
                      "\u2060-\u2069\ufeff\ufff9-\ufffb]")
_CONTROL_OR_NEWLINE = re.compile(_CONTROL.pattern[:-1] + "\n]")


def printable(value: object, newlines: bool = False) -> str:
    """A record's text as it may reach a terminal or a page: every control character (an
    escape sequence, a carriage return that overwrites a line, a bidirectional override, and
    a line break unless `newlines`) shown as its escape (`\\x1b`), so no record can move the
    cursor, recolour the screen or forge a line of dspark's own."""
    pattern = _CONTROL if newlines else _CONTROL_OR_NEWLINE

    def escape(m: re.Match[str]) -> str:
        code = ord(m[0])
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return pattern.sub(escape, str(value))


# -- writing ------------------------------------------------------------------------------------
def output_dir(directory: Path) -> Path:
    """`directory` made ready for outputs: created if missing; UsageError (exit 2) when it, or
    a path on its way, is a file, or it cannot be made."""
    directory = text_path(directory)
    if directory.is_symlink() and not directory.exists():
        raise UsageError(f"{shown_path(directory)} is a link to nowhere "
                         f"({shown_path(os.readlink(directory))}): dspark makes no directory "
                         "through a link; nothing was written.", hint="give --out a directory "
                         "(new or existing), or remove the link")
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{shown_path(directory)} is a file, not a directory: dspark writes "
                         "its outputs into a directory and replaces nothing that is not its "
                         "own; nothing was written.", hint="give --out a directory (new or "
                         "existing)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot make the output directory {shown_path(directory)} "
                         f"({e.strerror}); nothing was written.",
                         hint="give --out a directory you can write") from None
    return directory


def _real_dirs_below(root: Path, directory: Path) -> None:
    """Make `directory` (under `root`), refusing a link or a file planted on the way."""
    parts = directory.relative_to(root).parts
    here = root
    for part in parts:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            try:
                here.mkdir()
            except OSError as e:
                raise UsageError(f"cannot make {shown_path(here)} ({e.strerror}); nothing "
                                 "more was written.") from None
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{shown_path(here)} is a link or a file where dspark writes a "
                             "directory of its own (planted?): refused, nothing was written "
                             "through it.", hint=f"remove {shown_path(here)} and run again")


def write_atomic(path: Path, data: str | bytes, root: Path | None = None) -> Path:
    """Replace `path` with `data` (text as UTF-8) at once: a reader sees the old file or the
    new one, and a link planted at its name is replaced, not written through. With `root`,
    the directories between it and `path` are made and none may be a link."""
    path = text_path(path)
    if root is not None:
        _real_dirs_below(root, path.parent)
    if path.is_dir() and not path.is_symlink():
        raise UsageError(f"{shown_path(path)} is a directory where dspark writes a file: "
                         "refused, nothing was written.", hint=f"move {shown_path(path)} away")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise UsageError(f"cannot write {shown_path(path)} ({e.strerror or e}); the file "
                         "there, if any, is unchanged.", hint="check the directory's "
                         "permissions and free space") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return path


def png_bytes(fig: Any, **savefig: Any) -> bytes:
    """A matplotlib figure as PNG bytes, for `write_atomic` (savefig to a path would write
    through a link planted there)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig)
    return buf.getvalue()
