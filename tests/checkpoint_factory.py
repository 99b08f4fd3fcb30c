"""Tiny DeepSeek-V4/DSpark-shaped checkpoints, written with the safetensors library.

`build_checkpoint(dir)` writes config.json (model_type deepseek_v4 with the DSpark keys),
several shards and model.safetensors.index.json: trunk tensors, every `mtp.{i}.*` stage, the
Markov heads and the confidence head `mtp.{last}.confidence_head.proj.weight` of shape
`[1, hidden + rank]`. Helpers rewrite one piece of it (config, index, a shard) so tests can
corrupt exactly one thing, and `fingerprint` proves nothing on disk changed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import TensorSpec, serialize_file

INDEX = "model.safetensors.index.json"
# DeepSeek-V4-Flash(-DSpark)'s quantization: FP8 block-quantized linear layers (e4m3, ue8m0
# scales, 128 x 128 blocks) and FP4 experts (`expert_dtype`, beside it in config.json), the
# DeepSeek-native layout vLLM's DeepseekV4FP8Config reads.
DSV4_FLASH_QUANTIZATION = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                           "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
# safetensors header dtype -> (serialize_file dtype name, numpy storage dtype)
_STORAGE = {
    "F32": ("float32", np.float32),
    "F16": ("float16", np.float16),
    "BF16": ("bfloat16", np.uint16),
    "F8_E4M3": ("float8_e4m3fn", np.uint8),
    "I32": ("int32", np.int32),
}


@dataclass(frozen=True)
class Spec:
    """Shape of the tiny checkpoint; every default matches config.json."""

    hidden: int = 16
    vocab: int = 64
    draft_vocab: int = 32
    rank: int = 4
    n_mtp: int = 3
    n_layers: int = 2
    shards: int = 3
    head_dtype: str = "F32"
    with_confidence_head: bool = True
    config_extra: dict[str, Any] = field(default_factory=dict)

    def config(self) -> dict[str, Any]:
        return {
            "model_type": "deepseek_v4",
            "architectures": ["DeepseekV4ForCausalLM"],
            "hidden_size": self.hidden,
            "vocab_size": self.vocab,
            "draft_vocab_size": self.draft_vocab,
            "num_hidden_layers": self.n_layers,
            "n_mtp_layers": self.n_mtp,
            "dspark_target_layer_ids": list(range(self.n_layers)),
            "dspark_markov_rank": self.rank,
            "mask_token_id": self.vocab - 1,
            "enable_confidence_head": True,
            "expert_dtype": "fp4",
            "quantization_config": dict(DSV4_FLASH_QUANTIZATION),
            **self.config_extra,
        }


def tensor_shapes(spec: Spec) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Tensor name -> (dtype, shape), in a DeepSeek-V4-like naming."""
    h, v = spec.hidden, spec.vocab
    out: dict[str, tuple[str, tuple[int, ...]]] = {"embed.weight": ("F32", (v, h))}
    for i in range(spec.n_layers):
        out |= {
            f"layers.{i}.attn.wq.weight": ("F32", (h, h)),
            f"layers.{i}.attn_norm.weight": ("F32", (h,)),
            f"layers.{i}.ffn.experts.0.w1.weight": ("F8_E4M3", (2 * h, h)),
            f"layers.{i}.ffn.experts.0.w1.scale": ("F32", (2 * h,)),
        }
    out |= {"norm.weight": ("F32", (h,)), "head.weight": ("F32", (v, h))}
    for i in range(spec.n_mtp):
        out |= {
            f"mtp.{i}.e_proj.weight": ("F32", (h, h)),
            f"mtp.{i}.h_proj.weight": ("F32", (h, h)),
            f"mtp.{i}.norm.weight": ("F32", (h,)),
        }
    last = spec.n_mtp - 1
    out |= {
        f"mtp.{last}.markov_head.markov_w1.weight": ("F32", (v, spec.rank)),
        f"mtp.{last}.markov_head.markov_w2.weight": ("F32", (spec.draft_vocab, spec.rank)),
    }
    if spec.with_confidence_head:
        out[f"mtp.{last}.confidence_head.proj.weight"] = (
            spec.head_dtype, (1, spec.hidden + spec.rank)
        )
    return out


def random_array(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Seeded, finite values in the storage dtype (bf16 as the top half of float32)."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape).astype(np.float32) * 0.02
    if dtype == "BF16":
        return (values.view(np.uint32) >> 16).astype(np.uint16)
    if dtype == "F8_E4M3":
        return rng.integers(0, 0x7E, size=shape, dtype=np.uint8)
    return values.astype(_STORAGE[dtype][1])


def write_shard(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """Write tensors (name -> (header dtype, storage array)) with safetensors' own writer."""
    arrays = {n: np.ascontiguousarray(a) for n, (_, a) in tensors.items()}
    specs = {
        name: TensorSpec(
            dtype=_STORAGE[dtype][0], shape=list(arrays[name].shape),
            data_ptr=arrays[name].ctypes.data, data_len=arrays[name].nbytes,
        )
        for name, (dtype, _) in tensors.items()
    }
    serialize_file(specs, str(path), {"format": "pt"})


def build_checkpoint(root: Path, spec: Spec | None = None, **changes: Any) -> Path:
    """Write a tiny sharded DSpark checkpoint into root (created) and return root."""
    spec = replace(spec or Spec(), **changes)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(spec.config(), indent=2))
    shapes = tensor_shapes(spec)
    names = list(shapes)
    per_shard = -(-len(names) // spec.shards)
    weight_map: dict[str, str] = {}
    total = 0
    for s in range(spec.shards):
        shard = f"model-{s + 1:05d}-of-{spec.shards:05d}.safetensors"
        chunk = names[s * per_shard : (s + 1) * per_shard]
        tensors = {}
        for n in chunk:
            dtype, shape = shapes[n]
            tensors[n] = (dtype, random_array(dtype, shape, seed=len(weight_map)))
            weight_map[n] = shard
            total += tensors[n][1].nbytes
        write_shard(root / shard, tensors)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (root / INDEX).write_text(json.dumps(index, indent=2))
    (root / "tokenizer.json").write_text('{"version": "1.0"}')
    return root


def rewrite_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def shard_of(root: Path, tensor: str) -> Path:
    return root / json.loads((root / INDEX).read_text())["weight_map"][tensor]


def rewrite_shard(
    root: Path, shard: Path, change: Callable[[dict[str, tuple[str, np.ndarray]]], None]
) -> None:
    """Load a shard, let `change` edit its tensors, write it back (index left as it was)."""
    with open(shard, "rb") as fh:
        header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
    arrays = _load_raw(shard, header)
    tensors = {
        n: (header[n]["dtype"], arrays[n]) for n in header if n != "__metadata__"
    }
    change(tensors)
    write_shard(shard, tensors)


def _load_raw(shard: Path, header: dict[str, Any]) -> dict[str, np.ndarray]:
    raw = shard.read_bytes()
    base = 8 + int.from_bytes(raw[:8], "little")
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        start, end = spec["data_offsets"]
        out[name] = np.frombuffer(raw[base + start : base + end], _STORAGE[spec["dtype"]][1])
        out[name] = out[name].reshape(spec["shape"]).copy()
    return out


def build_hf_cache(cache: Path, spec: Spec | None = None) -> Path:
    """Lay a checkpoint out as the Hugging Face cache does and return its snapshot directory.

    `blobs/` holds each file under its own hash (SHA-256 for *.safetensors, the git blob SHA-1
    for the small files); `snapshots/<rev>/` links to them with relative symlinks.
    """
    staging = build_checkpoint(cache / "staging", spec)
    repo = cache / "models--deepseek-ai--DeepSeek-V4-Flash-DSpark"
    blobs = repo / "blobs"
    snapshot = repo / "snapshots" / ("0" * 40)
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for file in sorted(staging.iterdir()):
        data = file.read_bytes()
        if file.suffix == ".safetensors":
            name = hashlib.sha256(data).hexdigest()
        else:
            name = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        (blobs / name).write_bytes(data)
        (snapshot / file.name).symlink_to(Path("..", "..", "blobs", name))
        file.unlink()
    staging.rmdir()
    return snapshot


def fingerprint(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every path under root (links not followed) -> (mode, size, mtime, content or target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            if path.is_symlink():
                what = os.readlink(path)
            elif path.is_file():
                what = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                what = "dir"
            size = st.st_size if path.is_file() else 0
            out[str(path.relative_to(root))] = (st.st_mode, size, st.st_mtime_ns, what)
    return out
