"""What a secret is, and how dspark refers to one instead of writing or printing it.

A secret is the value of an environment variable whose name holds TOKEN, KEY, SECRET, PASSWORD
or CREDENTIAL (any case), of a vLLM option that carries one (`--api-key`, `--hf-token`: vLLM's
parser has no other), or the password of a URL (`scheme://user:password@host`). dspark passes a
secret to vLLM through the child's environment only, and everything it writes or prints refers
to the variable instead (`export HF_TOKEN="${HF_TOKEN:?...}"`, `user:${DSPARK_URL_PASSWORD_1}@`).

Secrets given as Hydra overrides never reach Hydra's own files (`hide`). Hydra writes the
overrides and the (unresolved) config into `.hydra/`, `multirun.yaml`, its launchers' job
pickles and `--cfg` output. So before Hydra sees them, each secret in an override (a
secret-named `*.env.*` variable, a secret vLLM option under `serving.extra_args`, a URL password
anywhere) moves into this process's environment, and the override refers to it:
`+hw.env.HF_TOKEN=${oc.env:DSPARK_SECRET_HW_ENV_HF_TOKEN}`. The config resolves to the real
value where dspark needs it (the child's environment); every file Hydra writes holds the
reference. Child processes (multirun jobs) inherit the variable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import shlex
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from dspark_cli.errors import UsageError
from dspark_cli.launch.vllm_options import resolve

SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
# vLLM options that carry a secret -> the environment variable vLLM reads it from instead.
SECRET_OPTIONS = {"api_key": "VLLM_API_KEY", "hf_token": "HF_TOKEN"}
REDACTED = "<redacted>"
MIN_SCRUBBED = 4  # shorter values are not searched for in free text (too many false hits)


# Variables of `env` maps whose values read a secret (`MY_VAR: ${oc.env:HF_TOKEN}`), learnt from
# this process's config (`learn_reads`): secrets by where their value comes from, not by name.
READS_SECRET: set[str] = set()


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(str(name))) or str(name) in READS_SECRET


@dataclass(frozen=True)
class UrlPassword:
    """The password of `scheme://user:password@` in a text: `text[start:end]`. A reference to
    a variable (`${VAR}`, `${oc.env:VAR}`, Kubernetes' `$(VAR)`) is what dspark writes instead,
    not a password."""

    start: int
    end: int
    value: str


# From `://` on, never from every position before it (an unanchored `scheme://` pattern costs
# the square of a long line): the scheme is read backwards from a match, over text no other
# match covers, so a text costs its length.
_URL_TAIL = re.compile(r"://[^/\s:@]*:(?!\$[{(])([^/\s@]+)(?=@)")
_SCHEME_TAIL = re.compile(r"[A-Za-z0-9+.-]*")  # matched on the reversed text before `://`
_LETTER = re.compile(r"[A-Za-z]")


def find_url_passwords(text: str) -> Iterator[UrlPassword]:
    """Every URL password in `text`, left to right, in time linear in its length."""
    text = str(text)
    floor = 0  # the previous match's end: a scheme never reaches back past its `@`
    for m in _URL_TAIL.finditer(text):
        at = m.start()
        before = text[at - 1] if at > floor else ""
        if before.isascii() and before.isalpha():  # `https://`: the scheme ends in a letter
            scheme = True
        else:  # a scheme is a letter, then letters, digits, `+`, `.` or `-`
            tail = _SCHEME_TAIL.match(text[floor:at][::-1])
            scheme = _LETTER.search(text, at - (tail.end() if tail else 0), at) is not None
        floor = m.end(1)
        if scheme:
            yield UrlPassword(m.start(1), m.end(1), m.group(1))


def url_passwords(text: str) -> list[str]:
    return [m.value for m in find_url_passwords(text)]


def redact_urls(text: str) -> str:
    """URL passwords replaced by a marker: `https://me:<redacted>@host`."""
    text, parts, last = str(text), [], 0
    for m in find_url_passwords(text):
        parts += [text[last:m.start], REDACTED]
        last = m.end
    return "".join([*parts, text[last:]])


def env_value(name: str, value: str) -> str:
    """An environment value as dspark may show it."""
    return REDACTED if is_secret_name(name) else redact_urls(value)


_REFERENCE = re.compile(r"^\$\{[^{}]*\}$")  # `${oc.env:VAR}`: where a secret is, not one


def secret_key(key: Any, parent: Any) -> bool:
    """A config key whose value is a secret: a secret-named variable of an `env` map, or a
    secret vLLM option (`api_key`, `--hf-token`, any spelling) wherever it appears."""
    name = str(key).strip().lstrip("-").lower().replace("-", "_")
    return (parent == "env" and is_secret_name(str(key))) or name in SECRET_OPTIONS


def values_in(data: Any, secret: bool = False, parent: Any = None) -> Iterator[str]:
    """Every secret value in plain config data: secret keys' values (and everything under
    them) and URL passwords anywhere."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from values_in(value, secret or secret_key(key, parent), key)
    elif isinstance(data, list | tuple):
        for item in data:
            yield from values_in(item, secret, parent)
    elif data is not None and not isinstance(data, bool):
        if secret and not _REFERENCE.match(str(data)):
            yield str(data)
        yield from url_passwords(str(data))


def redact(data: Any, secret: bool = False, parent: Any = None) -> Any:
    """Plain config data with every secret replaced by `<redacted>` (URL passwords in place)."""
    if isinstance(data, dict):
        return {k: redact(v, secret or secret_key(k, parent), k) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [redact(item, secret, parent) for item in data]
    if data is None or isinstance(data, bool):
        return data
    if secret and not _REFERENCE.match(str(data)):
        return REDACTED
    return redact_urls(data) if isinstance(data, str) else data


class Scrubber:
    """Removes known secret values from free text (messages, logs, files dspark writes)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self.values: set[str] = set()
        self.add(values)

    def add(self, values: Iterable[str]) -> None:
        self.values |= {v for v in values if len(v) >= MIN_SCRUBBED}

    def __call__(self, text: str) -> str:
        text = redact_urls(text)
        for value in sorted(self.values, key=len, reverse=True):
            text = text.replace(value, REDACTED)
        return text


SCRUB = Scrubber()  # this process's known secrets, filled as configs are composed

# In free text read back (a launch.sh that was edited, an older record): `NAME=value` of a
# secret-named variable (`export` lines, a command's prefix) and the value of a secret-carrying
# vLLM flag, unless the value refers to a variable (`"${HF_TOKEN:?...}"`, `$VAR`). Each pattern
# starts at a word's start and a quoted value ends within its line (at most 4096 characters),
# so a long line costs its length.
_VALUE = r"""("[^"\n]{0,4096}"|'[^'\n]{0,4096}'|\S+)"""
_ASSIGNMENT = re.compile(r"(?<![\w$-])([A-Za-z_]\w*)=" + _VALUE)
_SECRET_FLAG = re.compile(r"(?<![\w-])(--(?:api-key|hf-token)(?:=|[ \t]+))" + _VALUE)


def _a_reference(value: str) -> bool:
    return value.lstrip("\"'").startswith("$")


def redact_text(text: str) -> str:
    """Free text with every secret it shows replaced: secret-named assignments, secret flags'
    values, URL passwords and this process's known values (`SCRUB`)."""
    def assignment(m: re.Match[str]) -> str:
        if not is_secret_name(m[1]) or _a_reference(m[2]):
            return m[0]
        return f"{m[1]}={REDACTED}"

    def flag(m: re.Match[str]) -> str:
        return m[0] if _a_reference(m[2]) else m[1] + REDACTED

    return SCRUB(_SECRET_FLAG.sub(flag, _ASSIGNMENT.sub(assignment, str(text))))


def redacted(value: Any) -> Any:
    """`value` (a record read back, a report or any part of one: dataclasses, maps, lists)
    with every string through `redact_text` and every secret key's value through `redact`:
    the one filter for everything dspark writes or prints from a record."""
    if isinstance(value, str):
        return redact_text(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: redacted(getattr(value, f.name))
                                             for f in dataclasses.fields(value)})
    if isinstance(value, dict):
        return {redacted(k): redacted(v) for k, v in redact(value).items()}
    if isinstance(value, tuple | list):
        return type(value)(redacted(v) for v in value)
    return value


class ShellRefs:
    """Shell words that refer to URL passwords by variable (`$DSPARK_URL_PASSWORD_1`), and the
    export lines that make a script demand those variables. One instance names each password
    once, so every node of a layout refers to it by the same variable."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # password -> variable
        self.where: dict[str, str] = {}  # variable -> the text it was first seen in, redacted

    def _var(self, password: str, text: str) -> str:
        var = self.names.setdefault(password, f"DSPARK_URL_PASSWORD_{len(self.names) + 1}")
        self.where.setdefault(var, redact_urls(text))
        return var

    def register(self, text: str) -> None:
        """Name `text`'s URL passwords now (a fixed order for every rendering that follows)."""
        for m in find_url_passwords(text):
            self._var(m.value, str(text))

    def split(self, text: str) -> list[tuple[str, str | None]]:
        """`text` as (literal, None) and (variable, variable) pieces: each URL password becomes
        its variable's name, for a renderer to wrap in its own reference syntax."""
        pieces: list[tuple[str, str | None]] = []
        last = 0
        for m in find_url_passwords(text):
            var = self._var(m.value, text)
            pieces += [(text[last:m.start], None), (var, var)]
            last = m.end
        return [*pieces, (text[last:], None)]

    def word(self, text: str) -> str:
        """`text` quoted for the shell, its URL passwords as `${VAR}` references."""
        pieces = self.split(text)
        if len(pieces) == 1:
            return shlex.quote(text)
        return '"' + "".join("${" + v + "}" if v else _dq(t) for t, v in pieces) + '"'

    def variables(self) -> dict[str, str]:
        """variable -> password: what the environment of whoever runs the script must hold."""
        return {v: p for p, v in self.names.items()}

    def exports(self) -> list[str]:
        return [f'export {v}="${{{v}:?set {v} to the URL password}}"'
                for v in self.names.values()]


def _dq(text: str) -> str:
    """Text escaped for the inside of a double-quoted shell word."""
    return re.sub(r'([\\"$`])', r"\\\1", text)


class _ScrubbedStream(io.TextIOBase):
    """A text stream that writes through `SCRUB`: nothing dspark prints holds a secret."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(SCRUB(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return self._stream.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def scrubbed_output() -> Iterator[None]:
    """stdout and stderr through `SCRUB` for the block (restored after); the secrets learnt
    in it are forgotten after, so a later command's output is its own (a program may call
    `dspark_cli.cli.main` twice)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _ScrubbedStream(sys.stdout), _ScrubbedStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        SCRUB.values.clear()
        READS_SECRET.clear()


def learn(data: Any) -> None:
    """Add the secrets in a config's values (dicts, lists, scalars) to `SCRUB`."""
    SCRUB.add(values_in(data))


# `${oc.env:NAME` (and `${oc.env:NAME,default}`, nested): the variable an interpolation reads.
_ENV_READ = re.compile(r"\$\{oc\.env:\s*([^,}\s]+)")


def secret_reads(text: str) -> list[str]:
    """The secret-named variables `text` reads through `${oc.env:...}` (dspark's own
    `DSPARK_SECRET_*` references, made by `hide`, are not counted: they stand for a secret
    that is already handled where it sits)."""
    return [name for name in _ENV_READ.findall(str(text))
            if SECRET_NAME.search(name) and not name.startswith(PREFIX)]


def learn_reads(raw: Any, parent: Any = None, key: Any = None) -> None:
    """A value that reads a secret-named variable (`+hw.env.MY_VAR=${oc.env:H_API_TOKEN}`) is a
    secret wherever it lands: in the unresolved config `raw`, each such variable's value goes
    to `SCRUB`, and a variable of an `env` map that holds one becomes secret by name
    (`READS_SECRET`: exported by reference, redacted in records, a Kubernetes Secret's key)."""
    if isinstance(raw, dict):
        for k, value in raw.items():
            learn_reads(value, key, k)
    elif isinstance(raw, list | tuple):
        for item in raw:
            learn_reads(item, parent, key)
    elif isinstance(raw, str) and (names := secret_reads(raw)):
        SCRUB.add(os.environ[name] for name in names if name in os.environ)
        if parent == "env" and key is not None:
            READS_SECRET.add(str(key))


# -- secrets out of Hydra's overrides -------------------------------------------------------
PREFIX = "DSPARK_SECRET_"


def _override_is_secret(key: str) -> bool:
    """`<group>.env.<secret name>`, or a secret vLLM option under `serving.extra_args` (in
    any spelling vLLM's parser accepts, abbreviations included)."""
    parts = key.split(".")
    if len(parts) < 2:
        return False
    if parts[-2] == "extra_args":
        try:
            option = resolve(parts[-1])
        except UsageError:
            option = None
        if option is not None and option.dest in SECRET_OPTIONS:
            return True
    return secret_key(parts[-1], parts[-2])


def _var(key: str, suffix: str = "") -> str:
    return PREFIX + re.sub(r"[^A-Za-z0-9]", "_", key).upper() + suffix


def _quoted(text: str) -> str:
    """`text` as a single-quoted Hydra override value (interpolations inside still resolve)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _holds_secret(value: Any, key: str) -> bool:
    parts = key.split(".")
    return any(True for _ in values_in({parts[-1]: value},
                                       parent=parts[-2] if len(parts) > 1 else None))


def hide(overrides: list[str]) -> tuple[list[str], bool]:
    """The overrides with every secret moved into this process's environment, and whether
    any was. A secret inside a dict or sweep value is refused (give it its own override)."""
    if not any("://" in line or is_secret_name(line) for line in overrides):
        return overrides, False  # nothing to hide: Hydra's parser is not even loaded
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    out, hidden = [], False
    for line in overrides:
        try:
            override = parser.parse_override(line)
        except Exception:  # Hydra reports the syntax error itself, through the scrubbed output
            SCRUB.add(url_passwords(line))
            out.append(line)
            continue
        if override.is_delete() or override.value_type is None:
            out.append(line)
            continue
        key = override.key_or_group
        value = override.value()
        prefix = "++" if override.is_force_add() else "+" if override.is_add() else ""
        head = prefix + key + (f"@{override.package}" if override.package else "")
        scalar = isinstance(value, str | int | float) and not isinstance(value, bool)
        if scalar and _override_is_secret(key):
            os.environ[_var(key)] = str(value)
            SCRUB.add([str(value)])
            out.append(f"{head}=${{oc.env:{_var(key)}}}")
            hidden = True
        elif scalar and url_passwords(str(value)):
            text, parts, last = str(value), [], 0
            for i, m in enumerate(find_url_passwords(text), 1):
                var = _var(key, f"_URL_PASSWORD_{i}")
                os.environ[var] = m.value
                SCRUB.add([m.value])
                parts += [text[last:m.start], f"${{oc.env:{var}}}"]
                last = m.end
            out.append(f"{head}={_quoted(''.join(parts) + text[last:])}")
            hidden = True
        elif value is not None and not isinstance(value, bool) and (
                _override_is_secret(key) or url_passwords(line)
                or _holds_secret(value, key)):
            raise UsageError(f"`{key}` holds a secret inside a list, dict or sweep; give each "
                             "secret its own override (e.g. `+hw.env.HF_TOKEN=...`), so it is "
                             "never written.")
        else:
            out.append(line)
    return out, hidden
