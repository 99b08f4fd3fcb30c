"""Records read back are untrusted input: a run directory handed to `dspark report` or
`bench --report` may have been edited, copied, truncated or planted. Everything read goes
through here: a path must stay inside the directory it was found under (a symlink out of it is
refused), JSON is strict (no NaN or Infinity), and each field the reader uses has one JSON type
(`"valid": "false"` is no boolean). A record that breaks a rule is a `RecordError` (exit 2)
naming the file and the field. Files written beside records are replaced atomically, never
written through a link planted at their name."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dspark_cli.errors import UsageError

# What a field must be (said in the error as is).
BOOL = "a JSON boolean (true or false)"
INT = "an integer"
COUNT = "a non-negative integer"
NUMBER = "a finite number"
AMOUNT = "a finite non-negative number"
TEXT = "a string"
MAP = "a JSON object"
LIST = "a list"
Spec = Mapping[str, str]  # dotted field ("checks.*.name": each item) -> kind


class RecordError(UsageError):
    """A record dspark cannot have written as it is: the file, the field and what is wrong."""

    def __init__(self, path: Path | str, field: str, problem: str) -> None:
        super().__init__(f"{path}: {field} {problem}; the record is malformed (edited, "
                         "truncated, or not written by dspark), nothing was written.",
                         hint="restore the record from the run, or leave its run out")
        self.path, self.field = str(path), field


def contained(path: Path, root: Path) -> Path:
    """`path` resolved; RecordError when it (or a link on its way) leads outside `root`."""
    real = path.resolve()
    if not real.is_relative_to(root.resolve()):
        raise RecordError(path, "the path", f"leads outside {root} (to {real}): refused")
    return real


def read_text(path: Path, root: Path) -> str | None:
    """The file's text (None when there is none), read only if it stays inside `root`."""
    if not path.is_file() and not path.is_symlink():
        return None
    real = contained(path, root)
    if not real.is_file():
        raise RecordError(path, "the path", "is not a regular file")
    try:
        return real.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RecordError(path, "the file", f"cannot be read ({e})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: JSON, but no finite number
        raise ValueError(f"{text} is out of range")
    return value


def load_json(path: Path, root: Path) -> Any:
    """A JSON record inside `root` (None when there is none); RecordError when unreadable."""
    text = read_text(path, root)
    if text is None:
        return None
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except ValueError as e:
        raise RecordError(path, "the file", f"is not valid JSON ({e})") from None


def _is(value: Any, kind: str) -> bool:
    if kind == BOOL:
        return isinstance(value, bool)
    if kind in (INT, COUNT):
        return (isinstance(value, int) and not isinstance(value, bool)
                and (kind == INT or value >= 0))
    if kind in (NUMBER, AMOUNT):
        return (isinstance(value, int | float) and not isinstance(value, bool)
                and math.isfinite(value) and (kind == NUMBER or value >= 0))
    return isinstance(value, {TEXT: str, MAP: dict, LIST: list}[kind])


def _at(node: Any, steps: Sequence[str], where: str) -> Iterator[tuple[str, Any]]:
    """(field, value) at each place `steps` reaches; missing places give None."""
    if not steps:
        yield where, node
        return
    step, rest = steps[0], steps[1:]
    if node is None:
        return
    if step == "*":
        items = (node.items() if isinstance(node, dict) else enumerate(node)
                 if isinstance(node, list) else ())
        for key, value in items:
            yield from _at(value, rest, f"{where}[{key!r}]" if where else f"[{key!r}]")
        return
    if isinstance(node, dict):
        yield from _at(node.get(step), rest, f"{where}.{step}" if where else step)


def check(record: Any, path: Path | str, spec: Spec, required: Sequence[str] = ()) -> None:
    """RecordError unless `record` is a JSON object whose fields in `spec` have their kinds
    (absent or null is allowed, except for the `required` ones, in each object their parent
    path reaches: require the parent too where it must be there)."""
    if not isinstance(record, dict):
        raise RecordError(path, "the record", f"must be {MAP}")
    for dotted in required:  # wherever its parent is (`checks.*.name`: in each check)
        parent, _, last = dotted.rpartition(".")
        places = _at(record, parent.split("."), "") if parent else [("", record)]
        for where, node in places:
            if isinstance(node, dict) and node.get(last) is None:
                raise RecordError(path, f"{where}.{last}" if where else last, "is missing")
    for dotted, kind in spec.items():
        for where, value in _at(record, dotted.split("."), ""):
            if value is not None and not _is(value, kind):
                shown = json.dumps(value, default=str)
                shown = shown if len(shown) <= 40 else shown[:37] + "..."
                raise RecordError(path, where, f"must be {kind}, not {shown}")


def write_atomic(path: Path, data: str | bytes) -> None:
    """Replace `path` with `data` (text as UTF-8) at once: a reader sees the old file or the
    new one, and a link planted at its name is replaced, not written through."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
