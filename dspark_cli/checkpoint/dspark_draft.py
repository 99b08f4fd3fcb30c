"""A self-contained Qwen3 DSpark draft (`Qwen3DSparkModel`), checked fail closed.

vLLM 0.26 serves such a draft beside a Qwen3 target (`--speculative-config
'{"method":"dspark","model":DRAFT,...}'`). What it reads, from its `qwen3_dspark.py`,
`qwen3_dflash.py`, `config/speculative.py` and `v1/worker/gpu/spec_decode/utils.py`: config.json's
`markov_rank` (required: the Markov head's rank), a mask token (the first of
`dflash_config.mask_token_id`, `mask_token_id`, `dspark_noise_token_id`, `pard_token`,
`ptd_token_id`), the target layers whose hidden states feed `fc` (`dflash_config.target_layer_ids`,
`dspark_target_layer_ids` or `target_layer_ids`), optional `draft_vocab_size` (a smaller one needs
a `d2t` map) and `dspark_block_size` (K below it garbles the output); and the tensors
`draft_tensor_shapes` lists. A missing Markov head does not fail vLLM's loader loudly enough to
trust (the draft's weights are loaded by name), so every tensor and shape is proven here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspark_cli.checkpoint.headers import HeaderError
from dspark_cli.checkpoint.result import Check, Problem, problem
from dspark_cli.checkpoint.structure import Structure

ARCHITECTURE = "Qwen3DSparkModel"
MASK_TOKEN_KEYS = ("dflash_config.mask_token_id", "mask_token_id", "dspark_noise_token_id",
                   "pard_token", "ptd_token_id")
LAYER_ID_KEYS = ("dflash_config.target_layer_ids", "dspark_target_layer_ids", "target_layer_ids")
DRAFT_HINT = ("a Qwen3 DSpark draft needs its Markov head (markov_head.markov_w1/w2, sized by "
              "markov_rank); re-download the draft, or serve without DSpark (speculative=none)")
# The loader maps `midlayer.` to `layers.0.` (EAGLE-style single-layer drafts).
MIDLAYER = "midlayer."


def declares_qwen3_dspark(config: Mapping[str, Any] | None) -> bool:
    archs = (config or {}).get("architectures")
    return isinstance(archs, list) and ARCHITECTURE in archs


def _lookup(config: Mapping[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _count(value: Any, least: int = 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def draft_tensor_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The tensors a Qwen3 DSpark draft stores, by name (as the checkpoint names them: vLLM's
    loader prefixes `model.` and fuses q/k/v and gate/up), with their shapes: each decoder layer,
    `fc` over the target's hidden states at the target layers, the norms, the Markov head
    (`markov_w1` [vocab, rank], `markov_w2` [draft vocab, rank]) and, for a reduced draft
    vocabulary, `d2t`. embed_tokens and lm_head are optional (shared with the target). The config
    must hold valid sizes (`config_problems` says whether it does)."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    inter, rank, vocab = config["intermediate_size"], config["markov_rank"], config["vocab_size"]
    draft_vocab = config.get("draft_vocab_size") or vocab
    layer_ids = next(v for k in LAYER_ID_KEYS if (v := _lookup(config, k)) is not None)
    target_hidden = config.get("target_hidden_size") or hidden
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (hidden, target_hidden * len(layer_ids)),
        "hidden_norm.weight": (hidden,),
        "norm.weight": (hidden,),
        "markov_head.markov_w1.weight": (vocab, rank),
        "markov_head.markov_w2.weight": (draft_vocab, rank),
    }
    if draft_vocab != vocab:
        shapes["d2t"] = (draft_vocab,)
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            p + "self_attn.q_norm.weight": (head_dim,),
            p + "self_attn.k_norm.weight": (head_dim,),
            p + "mlp.gate_proj.weight": (inter, hidden),
            p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
        }
    return shapes


def config_problems(config: Mapping[str, Any]) -> list[Problem]:
    """Each config.json value vLLM 0.26 needs for the draft that is missing or of a wrong type."""
    found: list[Problem] = []

    def bad(code: str, key: str, expected: str, actual: object = "absent") -> None:
        found.append(problem(code, Check.head, key, expected, actual))

    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "vocab_size", "markov_rank"):
        value = config.get(key)
        if value is None:
            bad("dspark-key-missing", key, "a positive integer")
        elif not _count(value):
            bad("dspark-key-invalid", key, "a positive integer", value)
    for key in ("num_key_value_heads", "head_dim", "draft_vocab_size", "target_hidden_size",
                "dspark_block_size"):
        value = config.get(key)
        if value is not None and not _count(value):
            bad("dspark-key-invalid", key, "a positive integer or absent", value)
    mask = next((v for k in MASK_TOKEN_KEYS if (v := _lookup(config, k)) is not None), None)
    if mask is None:
        bad("dspark-key-missing", "mask token", "one of " + ", ".join(MASK_TOKEN_KEYS))
    elif not _count(mask, 0):
        bad("dspark-key-invalid", "mask token", "a token id", mask)
    elif _count(config.get("vocab_size")) and mask >= config["vocab_size"]:
        bad("dspark-key-invalid", "mask token", f"a token id below vocab_size "
            f"{config['vocab_size']}", mask)
    key = next((k for k in LAYER_ID_KEYS if _lookup(config, k) is not None), None)
    layers = None if key is None else _lookup(config, key)
    if key is None:
        bad("dspark-key-missing", "target layer ids", "one of " + ", ".join(LAYER_ID_KEYS))
    elif not (isinstance(layers, list) and layers and all(_count(i, 0) for i in layers)):
        bad("dspark-key-invalid", key, "a list of layer ids", layers)
    return found


def check_qwen3_dspark(config: Mapping[str, Any], structure: Structure) -> list[Problem]:
    """Every problem of a Qwen3 DSpark draft: its config keys, then each tensor vLLM loads
    (missing, or of another shape); a missing Markov head is named as such."""
    found = config_problems(config)
    if found:
        return found
    on_disk = {("layers.0." + n.removeprefix(MIDLAYER) if n.startswith(MIDLAYER) else n): n
               for n in structure.tensors}
    for name, shape in draft_tensor_shapes(config).items():
        markov = name.startswith("markov_head.")
        stored = on_disk.get(name)
        if stored is None:
            found.append(problem("markov-head-missing" if markov else "draft-tensor-missing",
                                 Check.head, name, f"a tensor of shape {list(shape)}", "absent",
                                 DRAFT_HINT if markov else ""))
            continue
        try:
            info = structure.tensor(stored)
        except HeaderError as exc:
            found.append(problem("head-unreadable", Check.head, stored, "a readable header", exc))
            continue
        if tuple(info.shape) != shape:
            found.append(problem("markov-head-shape" if markov else "draft-tensor-shape",
                                 Check.head, stored, f"{list(shape)} (from config.json)",
                                 list(info.shape), DRAFT_HINT if markov else ""))
    return found
