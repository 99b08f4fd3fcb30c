"""The DSpark draft's heads, checked fail closed.

vLLM does not fail closed: without `mtp.{i}.confidence_head.proj.weight` it sets the head to
None and adaptive verification silently falls back to an online estimator. So whenever
config.json declares a DSpark draft (a `dspark_*` key), this proves the head is there and usable:
the keys DSpark reads, every mtp stage, the confidence head (shape `[1, hidden + rank]`, a float
dtype, no bias, finite values read from that tensor alone) and the Markov heads.

A self-contained Qwen3 DSpark draft (`Qwen3DSparkModel`) is checked here too, fail closed.
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
vLLM 0.28 adds the draft's confidence head (`qwen3_dspark.py`'s `DSparkConfidenceHead`): built
only when config.json's `enable_confidence_head` is true, its `confidence_head.proj` is a float32
linear with a bias over the draft's hidden state and, when `confidence_head_with_markov` is true,
the Markov embedding (weight [1, hidden_size (+ markov_rank)], bias [1]). Without those tensors
its `load_weights` sets the head to None, and its DSpark speculator then refuses adaptive
verification at boot; so a declared head is checked here like DeepSeek-V4's (present, shaped,
float, finite), and `confidence_head` in the result says whether the draft has one at all.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark_cli.checkpoint.result import Check, Problem, problem
from dspark_cli.checkpoint.structure import (
    FLOAT_DTYPES,
    INDEX_NAME,
    HeaderError,
    Layout,
    Structure,
    TensorInfo,
    count_non_finite,
)

MASK_TOKEN_KEYS = (
    "mask_token_id", "dspark_noise_token_id", "dflash_config.mask_token_id", "pard_token",
    "ptd_token_id",
)
DEFAULT_N_MTP_LAYERS = 3
CONFIDENCE = "mtp.{}.confidence_head.proj.weight"
CONFIDENCE_BIAS = "mtp.{}.confidence_head.proj.bias"
MARKOV_W1 = "mtp.{}.markov_head.markov_w1.weight"
MARKOV_W2 = "mtp.{}.markov_head.markov_w2.weight"
_INDEX = r"(0|[1-9][0-9]*)"  # a stage number as str.format writes it
_STAGE = re.compile(rf"mtp\.{_INDEX}\.")


@dataclass(frozen=True)
class HeadResult:
    declared: bool  # config.json declares a DSpark draft
    problems: tuple[Problem, ...]
    # which: "deepseek_v4" (mtp.* stages in the checkpoint) or "qwen3_dspark" (a draft of its own)
    kind: str | None = None
    # config.json declares a confidence head (vLLM builds one): DeepSeek-V4's unless
    # `enable_confidence_head` is false, a Qwen3 DSpark draft's only when it is true
    confidence_head: bool = False

    @property
    def verified(self) -> bool:
        return self.declared and not self.problems


def declares_dspark(config: Mapping[str, Any] | None) -> bool:
    return config is not None and any(str(k).startswith("dspark_") for k in config)


def _lookup(config: Mapping[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class _Keys:
    """The config.json values the head check needs, with a problem for each bad one."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.problems: list[Problem] = []
        self.hidden = self._int(config, "hidden_size")
        self.vocab = self._int(config, "vocab_size")
        self.rank = self._int(config, "dspark_markov_rank")
        self.draft_vocab = self._int(config, "draft_vocab_size", default=self.vocab)
        self.stages = self._int(config, "n_mtp_layers", default=DEFAULT_N_MTP_LAYERS)
        layers = config.get("dspark_target_layer_ids")
        if layers is None:
            self._bad("dspark-key-missing", "dspark_target_layer_ids", "a list of layer ids")
        elif not (isinstance(layers, list) and layers and all(map(_non_negative_int, layers))):
            self._bad("dspark-key-invalid", "dspark_target_layer_ids", "a list of layer ids",
                      layers)
        if not any(_lookup(config, key) is not None for key in MASK_TOKEN_KEYS):
            self._bad("dspark-key-missing", "mask token", "one of " + ", ".join(MASK_TOKEN_KEYS))
        if config.get("enable_confidence_head") is False:
            self._bad("confidence-head-disabled", "enable_confidence_head", "true or absent", False)

    def _bad(self, code: str, key: str, expected: str, actual: object = "absent") -> None:
        self.problems.append(problem(code, Check.head, key, expected, actual))

    def _int(self, config: Mapping[str, Any], key: str, default: int | None = None) -> int | None:
        value = config.get(key, default)
        if value is None:
            self._bad("dspark-key-missing", key, "a positive integer")
        elif not _positive_int(value):
            self._bad("dspark-key-invalid", key, "a positive integer", value)
            return None
        return value


def _non_negative_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class _Tensors:
    """Tensor lookups across the index and the (valid) shard headers."""

    def __init__(self, layout: Layout, structure: Structure) -> None:
        self.structure = structure
        self.indexed = layout.index is not None
        self.listed = layout.index.weight_map if layout.index else {}
        self.names = self.listed.keys() | structure.tensors.keys()
        self.stages = sorted({int(m[1]) for n in self.names if (m := _STAGE.match(n))})

    def of(self, template: str, stages: int) -> list[str]:
        """The tensors of one per-stage template present for stages 0 .. stages-1, by stage:
        found among the names on disk, so a huge declared count costs nothing."""
        pattern = re.compile(re.escape(template).replace(r"\{\}", _INDEX))
        found = ((int(m[1]), n) for n in self.names if (m := pattern.fullmatch(n)))
        return [n for i, n in sorted(found) if i < stages]

    def info(self, name: str, missing_code: str) -> tuple[TensorInfo | None, Problem | None]:
        """A tensor that must be in the index and its shard's header, or why it is not."""
        shard = self.listed.get(name)
        located = self.structure.tensors.get(name)
        actual = None
        if self.indexed and shard is None:
            actual = f"not in {INDEX_NAME}" + (f" (but in {located}'s header)" if located else "")
        elif located is None and shard is not None and shard not in self.structure.headers:
            missing_code, actual = "head-unreadable", f"its shard {shard} is missing or invalid"
        elif located is None:
            actual = f"not in {shard}'s header" if shard else "in no shard"
        if actual:
            return None, problem(missing_code, Check.head, name,
                                 "in the index and its shard's header", actual)
        try:
            return self.structure.tensor(name), None
        except HeaderError as exc:
            return None, problem("head-unreadable", Check.head, name, "a readable header", exc)

    def path(self, name: str) -> Path:
        return self.structure.headers[self.structure.tensors[name]].path


def check_head(layout: Layout, structure: Structure) -> HeadResult:
    """Check the DSpark heads when config.json declares a DSpark draft (a DeepSeek-V4 checkpoint
    with its mtp.* stages, or a self-contained Qwen3 DSpark draft); report every problem."""
    config = layout.config
    if config is not None and declares_qwen3_dspark(config):
        if layout.index_broken:
            return HeadResult(True, (problem(
                "head-unreadable", Check.head, "markov_head.*",
                f"a valid {INDEX_NAME} to find the draft's tensors in", "the index is invalid"),),
                "qwen3_dspark", declares_confidence_head(config))
        return HeadResult(True, tuple(check_qwen3_dspark(config, structure)), "qwen3_dspark",
                          declares_confidence_head(config))
    if config is None or not declares_dspark(config):
        return HeadResult(False, ())
    confidence = config.get("enable_confidence_head") is not False
    keys = _Keys(config)
    problems = list(keys.problems)
    if layout.index_broken:
        return HeadResult(True, (*problems, problem(
            "head-unreadable", Check.head, "mtp.*", f"a valid {INDEX_NAME} to find the heads in",
            "the index is invalid",
        )), "deepseek_v4", confidence)
    tensors = _Tensors(layout, structure)
    stages = keys.stages or DEFAULT_N_MTP_LAYERS
    problems += [
        problem("mtp-stage-missing", Check.head,
                f"mtp.{lo}.*" if lo == hi else f"mtp.{lo}.* .. mtp.{hi}.*",
                f"tensors for each of mtp.0 .. mtp.{stages - 1}",
                "none" if lo == hi else f"none for {hi - lo + 1:,} stages")
        for lo, hi in stage_gaps(tensors.stages, stages)
    ]
    problems += [
        problem("confidence-head-bias", Check.head, name, "no bias tensor", "present")
        for name in tensors.of(CONFIDENCE_BIAS, stages)
    ]
    problems += _confidence(tensors, keys, stages)
    for template, rows, what in (
        (MARKOV_W1, keys.vocab, "vocab_size"), (MARKOV_W2, keys.draft_vocab, "draft_vocab_size")
    ):
        problems += _markov(tensors, template, stages, (rows, keys.rank), what)
    return HeadResult(True, tuple(problems), "deepseek_v4", confidence)


def stage_gaps(present: list[int], stages: int) -> list[tuple[int, int]]:
    """The ranges of stages 0 .. stages-1 with no tensor, from the sorted stages present: one
    range per gap, so their number is bounded by what is on disk, not by `n_mtp_layers`."""
    gaps, start = [], 0
    for i in [*(i for i in present if i < stages), stages]:
        if i > start:
            gaps.append((start, i - 1))
        start = i + 1
    return gaps


def _absent(code: str, template: str, stages: int) -> Problem:
    return problem(code, Check.head, template.format(stages - 1),
                   f"in {INDEX_NAME} and its shard's header (any stage 0..{stages - 1})",
                   "absent")


def _stages(tensors: _Tensors, template: str, stages: int,
            code: str) -> tuple[list[tuple[str, TensorInfo]], list[Problem]]:
    """The stages' tensors of one head with readable headers, and a problem for the rest
    (`code` when no stage has the head at all)."""
    found = tensors.of(template, stages)
    if not found:
        return [], [_absent(code, template, stages)]
    present, problems = [], []
    for name in found:
        info, missing = tensors.info(name, code)
        if missing is not None:
            problems.append(missing)
        elif info is not None:
            present.append((name, info))
    return present, problems


def _confidence(tensors: _Tensors, keys: _Keys, stages: int) -> list[Problem]:
    present, problems = _stages(tensors, CONFIDENCE, stages, "confidence-head-missing")
    for name, info in present:
        if keys.hidden and keys.rank and info.shape != (1, keys.hidden + keys.rank):
            problems.append(
                problem("confidence-head-shape", Check.head, name,
                        f"[1, {keys.hidden + keys.rank}] (1, hidden_size + dspark_markov_rank)",
                        list(info.shape))
            )
        if info.dtype not in FLOAT_DTYPES:
            problems.append(
                problem("confidence-head-dtype", Check.head, name,
                        "one of " + ", ".join(FLOAT_DTYPES), info.dtype)
            )
            continue
        problems += _finite(tensors.path(name), name, info)
    return problems


def _finite(path: Path, name: str, info: TensorInfo) -> list[Problem]:
    try:
        bad = count_non_finite(path, info)
    except HeaderError as exc:
        return [problem("head-unreadable", Check.head, name, "readable values", exc)]
    if bad is None:
        return [problem("head-unreadable", Check.head, name, "a head-sized float tensor",
                        f"{info.end - info.start:,} bytes of {info.dtype}")]
    if bad:
        return [problem("confidence-head-not-finite", Check.head, name, "all values finite",
                        f"{bad} of {math.prod(info.shape)} values are NaN or inf")]
    return []


def _markov(
    tensors: _Tensors, template: str, stages: int, shape: tuple[int | None, int | None],
    what: str,
) -> list[Problem]:
    present, problems = _stages(tensors, template, stages, "markov-head-missing")
    for name, info in present:
        if None not in shape and info.shape != shape:
            problems.append(
                problem("markov-head-shape", Check.head, name,
                        f"{list(shape)} ({what}, dspark_markov_rank)", list(info.shape))
            )
    return problems



# The Qwen3 DSpark draft

ARCHITECTURE = "Qwen3DSparkModel"
DRAFT_MASK_TOKEN_KEYS = ("dflash_config.mask_token_id", "mask_token_id", "dspark_noise_token_id",
                         "pard_token", "ptd_token_id")
LAYER_ID_KEYS = ("dflash_config.target_layer_ids", "dspark_target_layer_ids", "target_layer_ids")
DRAFT_HINT = ("a Qwen3 DSpark draft needs its Markov head (markov_head.markov_w1/w2, sized by "
              "markov_rank); re-download the draft, or serve without DSpark (speculative=none)")
# The loader maps `midlayer.` to `layers.0.` (EAGLE-style single-layer drafts).
MIDLAYER = "midlayer."
CONFIDENCE_HEAD = "confidence_head.proj."  # vLLM 0.28's Qwen3 DSpark confidence head
CONFIDENCE_HINT = (
    "vLLM 0.28 builds the declared confidence head only from these tensors: without them it "
    "drops the head and adaptive verification refuses to boot; use a draft that ships "
    "confidence_head.proj.weight and .bias, or serve with a fixed K (speculative=dspark_draft)")


def declares_qwen3_dspark(config: Mapping[str, Any] | None) -> bool:
    archs = (config or {}).get("architectures")
    return isinstance(archs, list) and ARCHITECTURE in archs


def declares_confidence_head(config: Mapping[str, Any]) -> bool:
    """A Qwen3 DSpark draft's config.json asks for a confidence head (vLLM 0.28 builds one when
    `enable_confidence_head` is truthy; `config_problems` refuses a value that is no bool)."""
    return config.get("enable_confidence_head") is True


def _count(value: Any, least: int = 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def draft_tensor_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The tensors a Qwen3 DSpark draft stores, by name (as the checkpoint names them: vLLM's
    loader prefixes `model.` and fuses q/k/v and gate/up), with their shapes: each decoder layer,
    `fc` over the target's hidden states at the target layers, the norms, the Markov head
    (`markov_w1` [vocab, rank], `markov_w2` [draft vocab, rank]) and, for a reduced draft
    vocabulary, `d2t`; a declared confidence head (`confidence_head.proj` weight [1, hidden
    (+ rank with `confidence_head_with_markov`)], bias [1]). embed_tokens and lm_head are optional
    (shared with the target). The config must hold valid sizes (`config_problems` says whether
    it does)."""
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
    if declares_confidence_head(config):
        markov = rank if config.get("confidence_head_with_markov") is True else 0
        shapes[CONFIDENCE_HEAD + "weight"] = (1, hidden + markov)
        shapes[CONFIDENCE_HEAD + "bias"] = (1,)
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
    for key in ("enable_confidence_head", "confidence_head_with_markov"):
        value = config.get(key)
        if value is not None and not isinstance(value, bool):
            bad("dspark-key-invalid", key, "true, false or absent", value)
    mask = next((v for k in DRAFT_MASK_TOKEN_KEYS if (v := _lookup(config, k)) is not None), None)
    if mask is None:
        bad("dspark-key-missing", "mask token", "one of " + ", ".join(DRAFT_MASK_TOKEN_KEYS))
    elif not _count(mask, 0):
        bad("dspark-key-invalid", "mask token", "a token id", mask)
    elif _count(config.get("vocab_size")) and mask >= config["vocab_size"]:
        bad("dspark-key-invalid", "mask token", f"a token id below vocab_size "
            f"{config['vocab_size']}", mask)
    layers_key = next((k for k in LAYER_ID_KEYS if _lookup(config, k) is not None), None)
    layers = None if layers_key is None else _lookup(config, layers_key)
    if layers_key is None:
        bad("dspark-key-missing", "target layer ids", "one of " + ", ".join(LAYER_ID_KEYS))
    elif not (isinstance(layers, list) and layers and all(_count(i, 0) for i in layers)):
        bad("dspark-key-invalid", layers_key, "a list of layer ids", layers)
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
        confidence = name.startswith(CONFIDENCE_HEAD)
        hint = DRAFT_HINT if markov else CONFIDENCE_HINT if confidence else ""
        stored = on_disk.get(name)
        if stored is None:
            code = ("markov-head-missing" if markov else "confidence-head-missing" if confidence
                    else "draft-tensor-missing")
            found.append(problem(code, Check.head, name, f"a tensor of shape {list(shape)}",
                                 "absent", hint))
            continue
        try:
            info = structure.tensor(stored)
        except HeaderError as exc:
            found.append(problem("head-unreadable", Check.head, stored, "a readable header", exc))
            continue
        if tuple(info.shape) != shape:
            code = ("markov-head-shape" if markov else "confidence-head-shape" if confidence
                    else "draft-tensor-shape")
            found.append(problem(code, Check.head, stored, f"{list(shape)} (from config.json)",
                                 list(info.shape), hint))
        elif confidence and info.dtype not in FLOAT_DTYPES:
            found.append(problem("confidence-head-dtype", Check.head, stored,
                                 "one of " + ", ".join(FLOAT_DTYPES), info.dtype, hint))
        elif confidence:
            found += _finite(structure.headers[structure.tensors[stored]].path, stored, info)
    return found
