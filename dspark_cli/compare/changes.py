"""What changed between two runs' records (pure): the arms' composed config, their exact
launch (launch.sh), the runtime versions and pins, the image, and the checkpoint's hashes, as
flat `key: value` facts, so a difference reads as one line each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dspark_cli.report.sources import BenchRecords

# Config keys that differ between any two runs without changing what ran.
_VOLATILE = ("hydra", "bench.arm", "bench.concurrency", "bench.repeat")


@dataclass(frozen=True)
class Change:
    key: str  # "config.<arm>.serving.args.max_num_seqs", "runtime.vllm_version", ...
    a: Any
    b: Any

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "a": self.a, "b": self.b}


def _flat(prefix: str, node: Any, out: dict[str, Any]) -> None:
    if isinstance(node, Mapping):
        for k, v in node.items():
            _flat(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = node


def facts(bench: BenchRecords) -> dict[str, Any]:
    """Everything a comparison names, flattened; the same for the same records."""
    out: dict[str, Any] = {}
    for arm, cfg in sorted(bench.arm_configs.items()):
        flat: dict[str, Any] = {}
        _flat("", cfg, flat)
        for key, value in flat.items():
            if not key.lstrip(".").startswith(_VOLATILE):
                out[f"config.{arm}{key}"] = value
    for arm, text in sorted(bench.arm_launches.items()):
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                out[f"launch.{arm}:{i}"] = line.strip()
    for arm, prov in sorted(bench.arm_provenance.items()):
        for group in ("runtime", "packages", "checkpoint", "torch_backends"):
            node = prov.get(group)
            if isinstance(node, Mapping):
                _flat(f"{group}.{arm}", node, out)
        image = (((bench.arm_configs.get(arm) or {}).get("deploy") or {}).get("k8s") or {})
        if isinstance(image, Mapping) and image.get("image"):
            out[f"image.{arm}"] = image["image"]
    return out


def _arm(key: str) -> str:
    """The arm a fact belongs to ("config.<arm>.x", "launch.<arm>:3", "runtime.<arm>.x")."""
    return key.split(".", 1)[1].split(".", 1)[0].split(":", 1)[0] if "." in key else ""


def changes(a: BenchRecords, b: BenchRecords) -> tuple[Change, ...]:
    """Every fact whose value differs, or that only one run has, in key order; an arm only one
    run has is one change (the arms), not each of its facts."""
    arms_a, arms_b = sorted(a.arm_configs), sorted(b.arm_configs)
    shared = set(arms_a) & set(arms_b)
    fa, fb = facts(a), facts(b)
    found = [Change(k, fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb))
             if fa.get(k) != fb.get(k) and _arm(k) in shared]
    return (*((Change("arms", arms_a, arms_b),) if arms_a != arms_b else ()), *found)
