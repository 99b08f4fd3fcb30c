"""What the installed vLLM supports of DSpark, read from its source files (never imported: an
import takes seconds): the `dspark` speculative method, `enable_adaptive_verification`, and the
V2 model runner switch (`VLLM_USE_V2_MODEL_RUNNER` in its envs.py)."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from dspark_cli.vllm.speculative_fields import has_field

_LIMIT = 4 << 20  # bytes read of one source file


@dataclass(frozen=True)
class VllmSupport:
    """True/False as the installed vLLM's source says; None where there is no vLLM to read."""

    method_dspark: bool | None
    adaptive_verification: bool | None
    v2_model_runner: bool | None

    def to_dict(self) -> dict[str, bool | None]:
        return asdict(self)


def _package_root() -> Path | None:
    spec = importlib.util.find_spec("vllm")
    roots = list(spec.submodule_search_locations or []) if spec else []
    return Path(roots[0]) if roots else None


def _text(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return ""


def support() -> VllmSupport:
    root = _package_root()
    if root is None:
        return VllmSupport(None, None, None)
    speculative = _text(root / "config" / "speculative.py")
    return VllmSupport(
        method_dspark=re.search(r"""Literal\[[^\]]*['"]dspark['"]""", speculative) is not None,
        adaptive_verification=has_field("enable_adaptive_verification"),
        v2_model_runner="VLLM_USE_V2_MODEL_RUNNER" in _text(root / "envs.py"),
    )
