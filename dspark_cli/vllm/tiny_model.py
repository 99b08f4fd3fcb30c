"""The tiny model of the CPU demo, made locally (this machine reaches no model hub).

A byte-level BPE tokenizer trained on a fixed local text and a 2-layer Llama with seeded random
weights (about 1 MB): deterministic, built once and cached. It speaks nonsense, which is all a
serving smoke test needs.
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


def build(path: Path) -> Path:
    """Create the tiny model at `path` unless it is there; safe against concurrent builders."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    import contextlib
    import io

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tiny-", dir=path.parent))
    try:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=VOCAB_SIZE, special_tokens=["<s>", "</s>", "<unk>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        with contextlib.redirect_stdout(io.StringIO()):
            tok.train_from_iterator(_corpus(), trainer=trainer)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                       unk_token="<unk>")
        fast.chat_template = CHAT_TEMPLATE
        fast.save_pretrained(work)
        config = LlamaConfig(
            vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
            bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
            tie_word_embeddings=False, torch_dtype="float32")
        torch.manual_seed(SEED)
        LlamaForCausalLM(config).save_pretrained(work, safe_serialization=True)
        try:
            os.rename(work, path)
        except OSError:
            if not (path / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return path


if __name__ == "__main__":
    import sys

    print(build(Path(sys.argv[1])))
