"""What changed between two runs' records (pure): the protocol (from the cells, recomputed),
the arms' composed config, their exact launch (launch.sh), the runtime versions and pins, the
image, and the checkpoint's hashes, as flat `key: value` facts, so a difference reads as one
line each. Every value passes the secret filter (`secrets.redacted`) as it becomes a fact."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dspark_cli.launch.secrets import redact, redacted
from dspark_cli.report.sources import BenchRecords

# Config keys that differ between any two runs without changing what ran (each arm's run
# record names the arm, concurrency and repeat it was composed for).
_VOLATILE = ("hydra", "bench.arm", "bench.concurrency", "bench.repeat")
# The protocol as its cells recorded it (the summary recomputed from them).
_PROTOCOL = ("protocol", "arms", "baseline", "concurrencies", "repeats", "equivalence_margin",
             "objectives", "prefix_caching")


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


def _volatile(key: str) -> bool:
    return any(key == v or key.startswith(v + ".") for v in _VOLATILE)


def facts(bench: BenchRecords) -> dict[str, Any]:
    """Everything a comparison names, flattened and redacted; the same for the same records."""
    out: dict[str, Any] = {}
    for field in _PROTOCOL:
        out[f"protocol.{field}"] = (bench.summary or {}).get(field)
    for arm, cfg in sorted(bench.arm_configs.items()):
        flat: dict[str, Any] = {}
        _flat("", redact(dict(cfg)), flat)
        for key, value in flat.items():
            if not _volatile(key.lstrip(".")):
                out[f"config.{arm}{key}"] = value
    for arm, text in sorted(bench.arm_launches.items()):
        for i, line in enumerate(text.split("\n"), 1):  # a shell's lines: \n only
            if line.strip() and not line.lstrip().startswith("#"):
                out[f"launch.{arm}:{i}"] = line.strip()
    for arm, prov in sorted(bench.arm_provenance.items()):
        for group in ("runtime", "packages", "checkpoint", "torch_backends"):
            node = prov.get(group)
            if isinstance(node, Mapping):
                _flat(f"{group}.{arm}", redact(dict(node)), out)
        image = (((bench.arm_configs.get(arm) or {}).get("deploy") or {}).get("k8s") or {})
        if isinstance(image, Mapping) and image.get("image"):
            out[f"image.{arm}"] = image["image"]
    return redacted(out)


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
             if fa.get(k) != fb.get(k) and (_arm(k) in shared or k.startswith("protocol."))]
    return (*((Change("arms", arms_a, arms_b),) if arms_a != arms_b else ()), *found)
