"""The tiny models, made locally (this machine reaches no model hub).

A byte-level BPE tokenizer trained on a fixed local text, and seeded random weights: the CPU
demo's 2-layer Llama (about 1 MB), and a DSpark pair for a GPU's first real DSpark run: a 4-layer
Qwen3 target and a one-layer Qwen3 DSpark draft with the config keys and tensors vLLM 0.26's
`qwen3_dspark.py` reads. Deterministic, built once and cached. They speak nonsense, which is all
a serving smoke test and a benchmark's mechanics need.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

VOCAB_SIZE = 1024
SEED = 0
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _corpus() -> list[str]:
    """Fixed text: the Zen of Python and a counting rhyme, enough for a 1k-token BPE."""
    import codecs
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # `import this` prints the Zen
        import this

    zen = codecs.decode(this.s, "rot13").splitlines()
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    rhyme = [" ".join(words[i:] + words[:i]) for i in range(len(words))]
    return (zen + rhyme) * 20


def _tokenizer(extra_special: tuple[str, ...] = ()):
    """The byte-level BPE tokenizer trained on the fixed text (special tokens first)."""
    import contextlib
    import io

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=["<s>", "</s>", "<unk>", *extra_special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    with contextlib.redirect_stdout(io.StringIO()):
        tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _publish(work: Path, path: Path) -> None:
    """Move the finished model into place; a concurrent builder that got there first wins."""
    try:
        os.rename(work, path)
    except OSError:
        if not (path / "config.json").is_file():
            raise


def build(path: Path) -> Path:
    """Create the tiny model at `path` unless it is there; safe against concurrent builders."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tiny-", dir=path.parent))
    try:
        fast = _tokenizer()
        fast.save_pretrained(work)
        config = LlamaConfig(
            vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
            bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
            tie_word_embeddings=False, torch_dtype="float32")
        torch.manual_seed(SEED)
        LlamaForCausalLM(config).save_pretrained(work, safe_serialization=True)
        _publish(work, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return path


# The DSpark pair. The draft reads the target's hidden states after layers 2 and 3
# (target_layer_ids [1, 2]: DSpark's "i - 1" numbering, vLLM adds one) and drafts blocks of
# DSPARK_BLOCK_SIZE tokens, masked slots fed as MASK_TOKEN (a special token of the shared
# tokenizer, so both vocabularies are the same and no d2t map is needed).
QWEN3_HIDDEN = 128
QWEN3_HEADS, QWEN3_KV_HEADS, QWEN3_HEAD_DIM = 2, 1, 64
QWEN3_TARGET_LAYERS = 4
DSPARK_TARGET_LAYER_IDS = (1, 2)
DSPARK_BLOCK_SIZE = 4
MARKOV_RANK = 16
MASK_TOKEN = "<|mask|>"


def _qwen3_fields(num_layers: int, fast) -> dict:
    return dict(
        vocab_size=VOCAB_SIZE, hidden_size=QWEN3_HIDDEN, intermediate_size=2 * QWEN3_HIDDEN,
        num_hidden_layers=num_layers, num_attention_heads=QWEN3_HEADS,
        num_key_value_heads=QWEN3_KV_HEADS, head_dim=QWEN3_HEAD_DIM,
        max_position_embeddings=2048, rms_norm_eps=1e-6, hidden_act="silu",
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False)


def draft_tensor_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """The tensors of a Qwen3 DSpark draft as the checkpoint stores them (vLLM 0.26's loader
    prefixes `model.`, fuses q/k/v and gate/up): the decoder layers, `fc` over the target's
    hidden states at `target_layer_ids`, the norms and the Markov head (`markov_w1` [V, r],
    `markov_w2` [draft V, r]); embed_tokens and lm_head are shared with the target."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads, head_dim = config["num_key_value_heads"], config["head_dim"]
    inter, rank = config["intermediate_size"], config["markov_rank"]
    vocab = config["vocab_size"]
    draft_vocab = config.get("draft_vocab_size") or vocab
    layer_ids = config["dflash_config"]["target_layer_ids"]
    target_hidden = config.get("target_hidden_size", hidden)
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (hidden, target_hidden * len(layer_ids)),
        "hidden_norm.weight": (hidden,),
        "norm.weight": (hidden,),
        "markov_head.markov_w1.weight": (vocab, rank),
        "markov_head.markov_w2.weight": (draft_vocab, rank),
    }
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


def build_qwen3_dspark(target: Path, draft: Path) -> tuple[Path, Path]:
    """Create the tiny Qwen3 target at `target` and its DSpark draft at `draft` (each unless it
    is there; safe against concurrent builders)."""
    import json

    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    target, draft = Path(target), Path(draft)
    fast = _tokenizer((MASK_TOKEN,))
    if not (target / "config.json").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".tiny-", dir=target.parent))
        try:
            fast.save_pretrained(work)
            torch.manual_seed(SEED)
            config = Qwen3Config(**_qwen3_fields(QWEN3_TARGET_LAYERS, fast),
                                 torch_dtype="bfloat16")
            Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(
                work, safe_serialization=True)
            _publish(work, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if not (draft / "config.json").is_file():
        draft.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".tiny-", dir=draft.parent))
        try:
            fast.save_pretrained(work)
            mask = fast.convert_tokens_to_ids(MASK_TOKEN)
            config = {
                "architectures": ["Qwen3DSparkModel"], "model_type": "qwen3",
                **_qwen3_fields(1, fast), "torch_dtype": "bfloat16",
                "rope_theta": 1000000.0, "attention_bias": False,
                "markov_rank": MARKOV_RANK, "dspark_block_size": DSPARK_BLOCK_SIZE,
                "mask_token_id": mask, "target_layer_ids": list(DSPARK_TARGET_LAYER_IDS),
                "dflash_config": {"mask_token_id": mask,
                                  "target_layer_ids": list(DSPARK_TARGET_LAYER_IDS)},
            }
            generator = torch.Generator().manual_seed(SEED + 1)
            tensors = {
                name: (torch.ones(shape) if len(shape) == 1
                       else torch.randn(shape, generator=generator) * 0.02
                       ).to(torch.bfloat16).contiguous()
                for name, shape in draft_tensor_shapes(config).items()
            }
            save_file(tensors, str(work / "model.safetensors"), metadata={"format": "pt"})
            (work / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            _publish(work, draft)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target, draft


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["qwen3-dspark"]:
        print(*build_qwen3_dspark(Path(sys.argv[2]), Path(sys.argv[3])), sep="\n")
    else:
        print(build(Path(sys.argv[1])))
