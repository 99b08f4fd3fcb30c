"""The structural pass over a DeepSeek-V4-Flash-DSpark-sized replica: 48 shards, 166,878,536,440
bytes, as sparse files with realistic headers (tens of thousands of FP4 expert tensors with their
scales, the trunk, three mtp stages and the DSpark heads). Goal: under 1 s, headers only.

    PYTHONPATH=. python benchmarks/checkpoint_structure.py [--dir /tmp/dspark-replica] [--keep]

In the same run, for reference: opening every shard with safetensors' own `safe_open` and
listing its tensors (the floor: dspark calls it for validation), and a `python -c` that reads
every header with json alone (no validation). The replica's disk use is its headers, a few MB.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

TARGET_BYTES = 166_878_536_440
SHARDS = 48
HIDDEN, VOCAB, DRAFT_VOCAB, RANK = 4096, 129_280, 32_768, 256
LAYERS, EXPERTS, MOE_INTER, N_MTP = 43, 256, 2048, 3
DTYPE_BYTES = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1, "F8_E8M0": 1}


def tensor_plan() -> list[tuple[str, str, list[int]]]:
    """(name, dtype, shape) in checkpoint order; FP4 experts packed two per U8 byte."""
    t: list[tuple[str, str, list[int]]] = [("embed.weight", "BF16", [VOCAB, HIDDEN])]

    def moe(prefix: str) -> None:
        t.append((f"{prefix}.ffn.gate.weight", "BF16", [EXPERTS, HIDDEN]))
        t.append((f"{prefix}.ffn.gate.bias", "F32", [EXPERTS]))
        for e in range(EXPERTS):
            for w, (rows, cols) in (("w1", (MOE_INTER, HIDDEN)), ("w2", (HIDDEN, MOE_INTER)),
                                    ("w3", (MOE_INTER, HIDDEN))):
                t.append((f"{prefix}.ffn.experts.{e}.{w}.weight", "U8", [rows, cols // 2]))
                t.append((f"{prefix}.ffn.experts.{e}.{w}.scale", "F8_E8M0", [rows, cols // 32]))
        for w, shape in (("w1", [MOE_INTER, HIDDEN]), ("w2", [HIDDEN, MOE_INTER]),
                         ("w3", [MOE_INTER, HIDDEN])):
            t.append((f"{prefix}.ffn.shared_experts.{w}.weight", "F8_E4M3", shape))
            t.append((f"{prefix}.ffn.shared_experts.{w}.scale", "F32",
                      [shape[0] // 128, shape[1] // 128]))

    def attention(prefix: str) -> None:
        for name, shape in (("wq_a", [1024, HIDDEN]), ("wq_b", [8192, 1024]),
                            ("wkv", [512, HIDDEN]), ("wo_a", [1024, 8192]),
                            ("wo_b", [HIDDEN, 1024]), ("indexer.wq_b", [2048, 1024]),
                            ("indexer.wk", [128, HIDDEN])):
            t.append((f"{prefix}.attn.{name}.weight", "F8_E4M3", shape))
            t.append((f"{prefix}.attn.{name}.scale", "F32", [shape[0] // 128, shape[1] // 128]))
        for name in ("attn_norm", "ffn_norm", "attn.q_norm", "attn.kv_norm"):
            t.append((f"{prefix}.{name}.weight", "BF16", [HIDDEN]))

    for layer in range(LAYERS):
        attention(f"layers.{layer}")
        moe(f"layers.{layer}")
    t += [("norm.weight", "BF16", [HIDDEN]), ("head.weight", "BF16", [VOCAB, HIDDEN])]
    for i in range(N_MTP):
        for name, shape in (("e_proj", [HIDDEN, HIDDEN]), ("h_proj", [HIDDEN, HIDDEN])):
            t.append((f"mtp.{i}.{name}.weight", "BF16", shape))
        for name in ("enorm", "hnorm", "norm"):
            t.append((f"mtp.{i}.{name}.weight", "BF16", [HIDDEN]))
        attention(f"mtp.{i}")
    last = N_MTP - 1
    t += [(f"mtp.{last}.markov_head.markov_w1.weight", "BF16", [VOCAB, RANK]),
          (f"mtp.{last}.markov_head.markov_w2.weight", "BF16", [DRAFT_VOCAB, RANK]),
          (f"mtp.{last}.confidence_head.proj.weight", "BF16", [1, HIDDEN + RANK])]
    return t


def nbytes(dtype: str, shape: list[int]) -> int:
    n = DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return n


def encode_header(tensors: list[tuple[str, str, list[int]]]) -> tuple[bytes, int]:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in tensors:
        size = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offset


def build_replica(root: Path) -> dict[str, int]:
    """Write the 48 sparse shards, the index and config.json; pad the last shard so the shards
    add up to exactly TARGET_BYTES (a 1-D U8 tensor, like the padding some exporters write)."""
    plan = tensor_plan()
    per = -(-len(plan) // SHARDS)
    groups = [plan[i * per : (i + 1) * per] for i in range(SHARDS)]
    names = [f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors" for i in range(SHARDS)]
    encoded = [encode_header(g) for g in groups[:-1]]
    used = sum(len(h) + data for h, data in encoded)
    pad = 0
    for _ in range(10):  # the pad's own digits change the header length: settle it
        last = [*groups[-1], ("pad", "U8", [pad])] if pad else groups[-1]
        header, data = encode_header(last)
        missing = TARGET_BYTES - used - len(header) - data
        if missing == 0:
            break
        pad += missing
    if missing:
        raise SystemExit("could not hit the target size exactly")
    groups[-1] = last
    encoded.append((header, data))
    root.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    for name, group, (head, data) in zip(names, groups, encoded, strict=True):
        with open(root / name, "wb") as fh:
            fh.write(head)
            fh.truncate(len(head) + data)  # sparse: the data is a hole
        weight_map.update({t[0]: name for t in group})
    total = sum(data for _, data in encoded)
    (root / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    (root / "config.json").write_text(json.dumps({
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
        "hidden_size": HIDDEN, "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB,
        "num_hidden_layers": LAYERS, "n_routed_experts": EXPERTS, "n_mtp_layers": N_MTP,
        "dspark_target_layer_ids": [1, 10, 20, 30, 41], "dspark_markov_rank": RANK,
        "mask_token_id": VOCAB - 1, "enable_confidence_head": True, "expert_dtype": "fp4",
    }, indent=2))
    return {"tensors": len(plan) + 1, "shards": SHARDS,
            "bytes": sum((root / n).stat().st_size for n in names),
            "disk_bytes": sum((root / n).stat().st_blocks * 512 for n in names)}


def timed(fn, repeats: int = 5) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def safetensors_open_all(root: Path) -> int:
    from safetensors import safe_open

    n = 0
    for path in sorted(root.glob("*.safetensors")):
        with safe_open(str(path), framework="numpy") as f:
            n += len(list(f.keys()))
    return n


READ_HEADERS = """
import json, struct, sys, glob
n = 0
for p in sorted(glob.glob(sys.argv[1] + '/*.safetensors')):
    with open(p, 'rb') as f:
        n += len(json.loads(f.read(struct.unpack('<Q', f.read(8))[0]))) - 1
print(n)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/dspark-replica"))
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    from dspark_cli.checkpoint.verify import verify_checkpoint

    start = time.perf_counter()
    facts = build_replica(args.dir)
    print(f"replica: {facts['shards']} shards, {facts['tensors']:,} tensors, "
          f"{facts['bytes']:,} bytes ({facts['disk_bytes'] / 1e6:.1f} MB on disk), built in "
          f"{time.perf_counter() - start:.1f} s")
    assert facts["bytes"] == TARGET_BYTES
    pins = {"num_shards": SHARDS, "total_bytes": TARGET_BYTES,
            "architecture": "DeepseekV4ForCausalLM"}
    try:
        report = verify_checkpoint(args.dir, pins)
        assert report.ok, report.problems
        assert report.head_verified and report.num_tensors == facts["tensors"]
        rows = {
            "dspark structural pass (structure + pins + heads)":
                timed(lambda: verify_checkpoint(args.dir, pins)),
            "safetensors safe_open of every shard, list keys":
                timed(lambda: safetensors_open_all(args.dir)),
            "python -c: json-read every header (no checks)":
                timed(lambda: subprocess.run([sys.executable, "-c", READ_HEADERS,
                                              str(args.dir)], check=True, capture_output=True)),
        }
        if importlib.util.find_spec("hydra"):
            rows["dspark verify-checkpoint CLI, end to end (Hydra)"] = timed(
                lambda: subprocess.run(
                    [sys.executable, "-m", "dspark_cli.cli", "verify-checkpoint", "model=local",
                     f"model.path={args.dir}", "+hw=cpu"], check=True, capture_output=True), 3)
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    print(f"\n{'what':<52} {'median s':>9} {'min s':>7}")
    for name, times in rows.items():
        print(f"{name:<52} {statistics.median(times):9.3f} {min(times):7.3f}")
    median = statistics.median(rows["dspark structural pass (structure + pins + heads)"])
    verdict = "PASS" if median < 1.0 else "FAIL"
    print(f"\nstructural pass over {TARGET_BYTES:,} bytes: {median:.3f} s (goal < 1 s): {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
