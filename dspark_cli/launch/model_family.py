"""A local checkpoint's config.json decides its model family, not the model option's name.

`model=local` on a DeepSeek-V4 checkpoint would drop the family's flags (`--kv-cache-dtype fp8`,
`--trust-remote-code`, its parsers) and rules (sparse MLA needs an fp8 KV cache), and a family
option on another architecture would force them on a model that cannot take them: both are
refused before anything runs, naming the option to use. config.json is read as untrusted input:
bounded in size, a regular file, a JSON object with fields of the right types.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.errors import UsageError

if TYPE_CHECKING:
    from dspark_cli.config.schema import ModelConf

MAX_CONFIG_BYTES = 8 << 20  # a model's config.json is kilobytes; no legitimate one comes close


@dataclass(frozen=True)
class Family:
    architectures: tuple[str, ...]
    model_types: tuple[str, ...]
    option: str  # the model option that serves any checkpoint of the family


FAMILIES = {
    "deepseek_v4": Family(("DeepseekV4ForCausalLM",), ("deepseek_v4",), "deepseek_v4_local"),
}


@dataclass(frozen=True)
class Declared:
    """What a checkpoint's config.json says it is."""

    architectures: tuple[str, ...]
    model_type: str | None

    @property
    def family(self) -> str | None:
        return next((name for name, f in FAMILIES.items()
                     if set(self.architectures) & set(f.architectures)
                     or self.model_type in f.model_types), None)

    def __str__(self) -> str:
        shown = ", ".join(self.architectures) or (self.model_type and f"model_type "
                                                  f"{self.model_type}")
        return shown or "no architecture"


def _bad(path: Path, why: str) -> UsageError:
    return UsageError(f"{path}: {why}; model.path must be a checkpoint directory whose "
                      f"{path.name} is the model's (a JSON object naming its architectures).")


def read_declared(root: Path) -> Declared | None:
    """What `root/config.json` declares; None when there is none (the structural check
    reports a missing file). UsageError for a file that cannot be a model's config."""
    from dspark_cli.checkpoint.structure import CONFIG_NAME, ParseError, parse_config

    path = root / CONFIG_NAME
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    except OSError as e:  # a symlink loop, a permission problem
        raise _bad(path, f"cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(info.st_mode):
        raise _bad(path, "is not a regular file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise _bad(path, f"is {info.st_size:,} bytes, more than any model config "
                         f"({MAX_CONFIG_BYTES >> 20} MiB)")
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:  # it grew since stat
            raise _bad(path, f"is more than any model config ({MAX_CONFIG_BYTES >> 20} MiB)")
        config = parse_config(raw)
    except OSError as e:
        raise _bad(path, f"cannot be read ({e.strerror or e})") from None
    except ParseError as e:
        raise _bad(path, str(e)) from None
    return Declared(_architectures(path, config), _model_type(path, config))


def _architectures(path: Path, config: dict[str, Any]) -> tuple[str, ...]:
    value = config.get("architectures")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise _bad(path, f"`architectures` must be a list of names, not {_shown(value)}")
    return tuple(value)


def _model_type(path: Path, config: dict[str, Any]) -> str | None:
    value = config.get("model_type")
    if value is not None and not isinstance(value, str):
        raise _bad(path, f"`model_type` must be a name, not {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def check_family(model: ModelConf) -> None:
    """Refuse a model option whose family is not the local checkpoint's (UsageError, exit 2).
    A path that is not a local directory (a hub id, another machine's path) is not read."""
    raw = model.path
    root = Path(str(raw)).expanduser() if raw else None
    if root is None or not root.is_dir():
        return
    declared = read_declared(root)
    if declared is None:
        return
    actual, chosen = declared.family, model.family
    if actual == chosen:
        return
    from dspark_cli.checkpoint.structure import CONFIG_NAME  # read only for a local checkpoint

    name = model.name
    if actual is not None:
        raise UsageError(
            f"{root}/{CONFIG_NAME} declares {declared} (the {actual} family), but model={name} "
            "serves it without that family's flags and rules (fp8 KV cache, trust-remote-code, "
            f"its parsers); use model={FAMILIES[actual].option} model.path={root}")
    raise UsageError(
        f"model={name} is for {chosen} checkpoints, but {root}/{CONFIG_NAME} declares "
        f"{declared}; use model=local model.path={root}")
