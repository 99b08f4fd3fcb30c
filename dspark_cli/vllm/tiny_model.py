"""The tiny models, made locally (this machine reaches no model hub).

A byte-level BPE tokenizer trained on a fixed local text, and seeded random weights: the CPU
demo's 2-layer Llama (about 1 MB), and a DSpark pair for a GPU's first real DSpark run: a 4-layer
Qwen3 target and a one-layer Qwen3 DSpark draft with the config keys and tensors vLLM 0.26's
`qwen3_dspark.py` reads, and the confidence head vLLM 0.28's adaptive verification needs (or,
with `--no-confidence-head`, a draft whose config declares the head but lacks its tensors: the
case dspark must refuse). Deterministic, built once and cached. They speak nonsense, which is all
a serving smoke test and a benchmark's mechanics need.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from dspark_cli.checkpoint.head import CONFIDENCE_HEAD, draft_tensor_shapes

VOCAB_SIZE = 1024
SEED = 0
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _corpus() -> list[str]:
    """Fixed text: the Zen of Python and a counting rhyme, enough for a 1k-token BPE."""
    with contextlib.redirect_stdout(io.StringIO()):  # `import this` prints the Zen
        import this

    zen = codecs.decode(this.s, "rot13").splitlines()
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    rhyme = [" ".join(words[i:] + words[:i]) for i in range(len(words))]
    return (zen + rhyme) * 20


def _tokenizer(extra_special: tuple[str, ...] = ()):
    """The byte-level BPE tokenizer trained on the fixed text (special tokens first)."""
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


# The DSpark pair. Random weights alone make a useless GPU check: a random model's top logits
# are so close that bf16 noise from another batch shape flips them (greedy outputs of the two
# arms differ, and the lossless check fails for the wrong reason), and a random draft is never
# accepted (DSpark's accept path never runs). So, seeded as before, two things are built in:
# the target's attention and MLP outputs are zero (their kernels still run) and its lm_head maps
# each token t to next(t) with a margin of LOGIT_MARGIN over the rest; the draft's Markov head
# (rank = vocabulary) adds MARKOV_BIAS to next(previous token). The target then counts through
# the vocabulary, and the draft predicts it. The draft reads the target's hidden states after
# layers 2 and 3 (target_layer_ids [1, 2]: DSpark's "i - 1" numbering) and drafts blocks of
# DSPARK_BLOCK_SIZE, masked slots fed as MASK_TOKEN (a special token of the shared tokenizer,
# so both vocabularies are one and no d2t map is needed).
QWEN3_HIDDEN = 128
QWEN3_HEADS, QWEN3_KV_HEADS, QWEN3_HEAD_DIM = 2, 1, 64
QWEN3_TARGET_LAYERS = 4
DSPARK_TARGET_LAYER_IDS = (1, 2)
DSPARK_BLOCK_SIZE = 4
MASK_TOKEN = "<|mask|>"
FIRST_WORD = 4  # ids below are the special tokens <s>, </s>, <unk>, <|mask|>
LOGIT_MARGIN = 10.0
MARKOV_BIAS = 50.0
# The confidence head (vLLM 0.28's `DSparkConfidenceHead`: `confidence_head.proj`, float32, over
# [draft hidden state, Markov embedding] since `confidence_head_with_markov`). Adaptive
# verification (v1/worker/gpu/spec_decode/adaptive_verification.py) ranks a step's draft slots
# by survival (the running product of a request's confidences) and keeps the budget that
# maximises (expected accepted tokens) / (profiled step cost): a constant confidence would trim
# every request alike, and on a tiny model whose step costs are flat it would trim nothing.
# The Markov embedding is one-hot in the previous token (markov_w1 is the identity), so the
# head's Markov part gives token t the logit of CONFIDENCE_LEVELS[t % 7], and a seeded term over
# the (unit-RMS) hidden state of std CONFIDENCE_HIDDEN_STD varies it by context: confidences
# spread about 0.2 .. 0.95. One level in seven is 0 (a logit of NEVER: sigmoid gives exactly 0
# in float32): a slot after it survives with 0, adds nothing to the expected tokens, and is
# never worth its cost however flat the costs are, so the verify widths vary with the tokens.
CONFIDENCE_LEVELS = (0.95, 0.9, 0.8, 0.6, 0.4, 0.2, 0.0)
NEVER = -200.0
CONFIDENCE_HIDDEN_STD = 0.3


def next_token(token: int) -> int:
    """The target's greedy successor: the next non-special id, cyclically."""
    if token < FIRST_WORD:
        return FIRST_WORD
    return FIRST_WORD + (token - FIRST_WORD + 1) % (VOCAB_SIZE - FIRST_WORD)


def _qwen3_fields(num_layers: int, fast) -> dict:
    return dict(
        vocab_size=VOCAB_SIZE, hidden_size=QWEN3_HIDDEN, intermediate_size=2 * QWEN3_HIDDEN,
        num_hidden_layers=num_layers, num_attention_heads=QWEN3_HEADS,
        num_key_value_heads=QWEN3_KV_HEADS, head_dim=QWEN3_HEAD_DIM,
        max_position_embeddings=2048, rms_norm_eps=1e-6, hidden_act="silu",
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False)


def _counting_target(model) -> None:
    """Make the seeded Qwen3 count: zero attention/MLP outputs, lm_head[next(t)] ~ embed[t]."""
    import torch

    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embed = model.model.embed_tokens.weight
        unit = embed / embed.pow(2).mean(-1, keepdim=True).sqrt()  # what the final norm gives
        head = torch.zeros_like(model.lm_head.weight)
        for token in range(VOCAB_SIZE):
            head[next_token(token)] += unit[token] * (LOGIT_MARGIN / QWEN3_HIDDEN)
        model.lm_head.weight.copy_(head)


def _draft_tensors(config: dict, confidence_head: bool = True):
    """The draft's tensors: seeded random layers and fc, unit norms, the counting Markov head,
    and (unless left out) the float32 confidence head."""
    import torch

    generator = torch.Generator().manual_seed(SEED + 1)
    shapes = {n: s for n, s in draft_tensor_shapes(config).items()
              if not n.startswith(CONFIDENCE_HEAD)}
    tensors = {name: torch.ones(shape) if len(shape) == 1
               else torch.randn(shape, generator=generator) * 0.02
               for name, shape in shapes.items()}
    tensors["markov_head.markov_w1.weight"] = torch.eye(VOCAB_SIZE)
    w2 = torch.zeros(VOCAB_SIZE, VOCAB_SIZE)
    for token in range(VOCAB_SIZE):
        w2[next_token(token), token] = MARKOV_BIAS
    tensors["markov_head.markov_w2.weight"] = w2
    tensors = {n: t.to(torch.bfloat16).contiguous() for n, t in tensors.items()}
    if confidence_head:
        tensors |= _confidence_head(generator)
    return tensors


def _confidence_head(generator) -> dict:
    """`confidence_head.proj.{weight,bias}`: [1, hidden + markov rank] and [1], float32."""
    import torch

    levels = torch.tensor(CONFIDENCE_LEVELS)[torch.arange(VOCAB_SIZE) % len(CONFIDENCE_LEVELS)]
    by_token = torch.where(levels > 0, torch.logit(levels), torch.tensor(NEVER))
    hidden = torch.randn(QWEN3_HIDDEN, generator=generator) * (
        CONFIDENCE_HIDDEN_STD / QWEN3_HIDDEN ** 0.5)
    return {CONFIDENCE_HEAD + "weight": torch.cat([hidden, by_token]).unsqueeze(0).contiguous(),
            CONFIDENCE_HEAD + "bias": torch.zeros(1)}


def build_qwen3_dspark(target: Path, draft: Path,
                       confidence_head: bool = True) -> tuple[Path, Path]:
    """Create the tiny Qwen3 target at `target` and its DSpark draft at `draft` (each unless it
    is there; safe against concurrent builders). The draft's config declares the confidence head
    either way; `confidence_head=False` leaves its tensors out."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    target, draft = Path(target), Path(draft)
    if (target / "config.json").is_file() and (draft / "config.json").is_file():
        return target, draft
    fast = _tokenizer((MASK_TOKEN,))
    if not (target / "config.json").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".tiny-", dir=target.parent))
        try:
            fast.save_pretrained(work)
            torch.manual_seed(SEED)
            config = Qwen3Config(**_qwen3_fields(QWEN3_TARGET_LAYERS, fast),
                                 torch_dtype="bfloat16")
            model = Qwen3ForCausalLM(config)
            _counting_target(model)
            model.to(torch.bfloat16).save_pretrained(work, safe_serialization=True)
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
                "markov_rank": VOCAB_SIZE, "dspark_block_size": DSPARK_BLOCK_SIZE,
                "enable_confidence_head": True, "confidence_head_with_markov": True,
                "mask_token_id": mask, "target_layer_ids": list(DSPARK_TARGET_LAYER_IDS),
                "dflash_config": {"mask_token_id": mask,
                                  "target_layer_ids": list(DSPARK_TARGET_LAYER_IDS)},
            }
            save_file(_draft_tensors(config, confidence_head), str(work / "model.safetensors"),
                      metadata={"format": "pt"})
            (work / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            _publish(work, draft)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target, draft


def _same_head(draft: Path, confidence_head: bool) -> None:
    """Refuse a draft already made with the confidence head when it is asked for without, or
    the other way round: the maker keeps what is there, and serving it would test the other
    case (ValueError)."""
    from safetensors import safe_open

    with safe_open(str(draft / "model.safetensors"), "pt") as shard:
        has = any(n.startswith(CONFIDENCE_HEAD) for n in shard.keys())  # noqa: SIM118
    if has != confidence_head:
        raise ValueError(
            f"{draft} already holds a draft {'with' if has else 'without'} the confidence head; "
            f"give another directory, or remove it to make it "
            f"{'with' if confidence_head else 'without'} the head")


def main(argv: list[str]) -> int:
    """`python -m dspark_cli.vllm.tiny_model DIR`, or `... qwen3-dspark TARGET DRAFT
    [--no-confidence-head]`: make the model(s), print their paths."""
    if len(argv) == 1 and not argv[0].startswith("-") and argv[0] != "qwen3-dspark":
        print(build(Path(argv[0])))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m dspark_cli.vllm.tiny_model",
        usage="%(prog)s DIR | %(prog)s qwen3-dspark TARGET DRAFT [--no-confidence-head]")
    parser.add_argument("kind", choices=["qwen3-dspark"])
    parser.add_argument("target", type=Path)
    parser.add_argument("draft", type=Path)
    parser.add_argument("--no-confidence-head", action="store_true",
                        help="leave the confidence head's tensors out (config.json still "
                             "declares it): the draft dspark must refuse for adaptive")
    args = parser.parse_args(argv)
    try:
        paths = build_qwen3_dspark(args.target, args.draft, not args.no_confidence_head)
        _same_head(args.draft, not args.no_confidence_head)
    except ValueError as exc:
        parser.error(str(exc))
    print(*paths, sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
