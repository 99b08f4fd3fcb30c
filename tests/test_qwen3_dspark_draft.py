"""A Qwen3 DSpark draft (`Qwen3DSparkModel`, vLLM 0.26's self-contained DSpark draft) under
`dspark verify-checkpoint model=qwen3_dspark_draft`: real safetensors files, the keys and tensor
names vLLM 0.26's qwen3_dspark.py / qwen3_dflash.py read, fail closed on a missing Markov head;
and vLLM 0.28's confidence head, checked when config.json declares it and required before an
adaptive boot (`dspark serve speculative=dspark_adaptive`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_factory import build_checkpoint, fingerprint, write_shard

from dspark_cli.checkpoint.verify import verify_checkpoint
from tests.conftest import dspark_argv

REPO = Path(__file__).resolve().parents[1]
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, RANK = 32, 2, 1, 16, 64, 48, 4

# The names and shapes read off vLLM 0.26's Qwen3DSparkModel for this config (the loader adds
# `model.`; q/k/v and gate/up are fused on load): written out, not derived, so a change to
# dspark's own table cannot pass unnoticed.
VLLM_026_TENSORS = {
    "fc.weight": [HIDDEN, 2 * HIDDEN],
    "hidden_norm.weight": [HIDDEN],
    "norm.weight": [HIDDEN],
    "markov_head.markov_w1.weight": [VOCAB, RANK],
    "markov_head.markov_w2.weight": [VOCAB, RANK],
    "layers.0.self_attn.q_proj.weight": [HEADS * HEAD_DIM, HIDDEN],
    "layers.0.self_attn.k_proj.weight": [KV_HEADS * HEAD_DIM, HIDDEN],
    "layers.0.self_attn.v_proj.weight": [KV_HEADS * HEAD_DIM, HIDDEN],
    "layers.0.self_attn.o_proj.weight": [HIDDEN, HEADS * HEAD_DIM],
    "layers.0.self_attn.q_norm.weight": [HEAD_DIM],
    "layers.0.self_attn.k_norm.weight": [HEAD_DIM],
    "layers.0.mlp.gate_proj.weight": [INTER, HIDDEN],
    "layers.0.mlp.up_proj.weight": [INTER, HIDDEN],
    "layers.0.mlp.down_proj.weight": [HIDDEN, INTER],
    "layers.0.input_layernorm.weight": [HIDDEN],
    "layers.0.post_attention_layernorm.weight": [HIDDEN],
}


# vLLM 0.28's qwen3_dspark.py: `DSparkConfidenceHead(input_dim, bias=True, ...)`, a float32
# ReplicatedLinear(input_dim, 1) named `confidence_head.proj`, input_dim = hidden_size, plus
# markov_rank when `confidence_head_with_markov`; built when `enable_confidence_head`.
HEAD_WEIGHT, HEAD_BIAS = "confidence_head.proj.weight", "confidence_head.proj.bias"
WITH_HEAD = {"enable_confidence_head": True, "confidence_head_with_markov": True}


def head_tensors(width: int = HIDDEN + RANK, dtype: str = "F32",
                 values: float = 0.5) -> dict[str, tuple[str, np.ndarray]]:
    array = np.full((1, width), values, np.float32 if dtype == "F32" else np.int32)
    return {HEAD_WEIGHT: (dtype, array), HEAD_BIAS: ("F32", np.zeros(1, np.float32))}


def draft_config(**changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": ["Qwen3DSparkModel"], "model_type": "qwen3",
        "hidden_size": HIDDEN, "intermediate_size": INTER, "num_hidden_layers": 1,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "vocab_size": VOCAB, "rms_norm_eps": 1e-6, "markov_rank": RANK, "dspark_block_size": 4,
        "dflash_config": {"mask_token_id": 3, "target_layer_ids": [1, 2]},
    }
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def write_draft(root: Path, config: dict[str, Any] | None = None,
                tensors: dict[str, list[int]] | None = None,
                head: dict[str, tuple[str, np.ndarray]] | None = None) -> Path:
    """A draft directory: config.json and one model.safetensors of bf16 tensors (and `head`'s
    tensors as given)."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config or draft_config()))
    write_shard(root / "model.safetensors",
                {n: ("BF16", np.zeros(shape, np.uint16))
                 for n, shape in (VLLM_026_TENSORS if tensors is None else tensors).items()}
                | (head or {}))
    return root


def codes(root: Path) -> list[str]:
    return [p.code for p in verify_checkpoint(root).problems]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(dspark_argv("verify-checkpoint", *args), cwd=cwd, capture_output=True,
                          text=True, timeout=120,
                          env={"PYTHONPATH": os.pathsep.join(
                              p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
                               "PATH": "/usr/bin:/bin", "HOME": str(cwd)})
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_a_complete_draft_passes_the_profile_and_nothing_is_written(tmp_path: Path) -> None:
    draft = write_draft(tmp_path / "draft")
    before = fingerprint(draft)
    done = cli("model=qwen3_dspark_draft", f"model.path={draft}", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["checks"] == {"structure": "passed", "pins": "passed", "head": "passed"}
    assert report["draft_kind"] == "qwen3_dspark" and report["head_verified"] is True
    assert fingerprint(draft) == before
    table = cli("model=qwen3_dspark_draft", f"model.path={draft}", cwd=tmp_path).stdout
    assert "Qwen3 DSpark draft: keys, Markov head" in table


@pytest.mark.parametrize("gone", ["markov_head.markov_w1.weight", "markov_head.markov_w2.weight"])
def test_a_missing_markov_head_fails_closed(tmp_path: Path, gone: str) -> None:
    draft = write_draft(tmp_path / "draft",
                        tensors={n: s for n, s in VLLM_026_TENSORS.items() if n != gone})
    done = cli("model=qwen3_dspark_draft", f"model.path={draft}", "--json", cwd=tmp_path)
    assert done.returncode == 1
    problems = json.loads(done.stdout)["problems"]
    assert [(p["code"], p["subject"]) for p in problems] == [("markov-head-missing", gone)]
    assert "speculative=none" in problems[0]["hint"]


def test_a_markov_head_of_another_rank_is_refused(tmp_path: Path) -> None:
    draft = write_draft(tmp_path / "draft", draft_config(markov_rank=RANK * 2))
    found = verify_checkpoint(draft).problems
    assert {(p.code, p.subject, p.actual) for p in found} == {
        ("markov-head-shape", "markov_head.markov_w1.weight", str([VOCAB, RANK])),
        ("markov-head-shape", "markov_head.markov_w2.weight", str([VOCAB, RANK])),
    }
    assert found[0].expected.startswith(str([VOCAB, RANK * 2]))


@pytest.mark.parametrize(("changes", "subject"), [
    ({"markov_rank": None}, "markov_rank"),
    ({"dflash_config": {"target_layer_ids": [1, 2]}}, "mask token"),
    ({"dflash_config": {"mask_token_id": 3}}, "target layer ids"),
])
def test_a_key_vllm_needs_is_missing(tmp_path: Path, changes: dict[str, Any],
                                     subject: str) -> None:
    draft = write_draft(tmp_path / "draft", draft_config(**changes))
    found = verify_checkpoint(draft).problems
    assert [(p.code, p.subject) for p in found] == [("dspark-key-missing", subject)]


def test_the_keys_vllm_also_reads_are_accepted(tmp_path: Path) -> None:
    """The mask token at top level or as dspark_noise_token_id, and the layer ids as
    dspark_target_layer_ids (vLLM 0.26's spec_decode/utils.py and eagle3_utils.py)."""
    config = draft_config(dflash_config=None, dspark_noise_token_id=5,
                          dspark_target_layer_ids=[0, 3])
    assert codes(write_draft(tmp_path / "draft", config)) == []


def test_a_mask_token_outside_the_vocabulary_is_refused(tmp_path: Path) -> None:
    config = draft_config(dflash_config={"mask_token_id": VOCAB, "target_layer_ids": [1, 2]})
    assert codes(write_draft(tmp_path / "draft", config)) == ["dspark-key-invalid"]


def test_fc_must_match_the_target_layers(tmp_path: Path) -> None:
    """Three target layers make fc [hidden, 3 x hidden]: a two-layer fc is refused, as vLLM's
    combine_hidden_states would refuse the hidden states at the first request."""
    config = draft_config(dflash_config={"mask_token_id": 3, "target_layer_ids": [0, 1, 2]})
    found = verify_checkpoint(write_draft(tmp_path / "draft", config)).problems
    assert [(p.code, p.subject, p.actual) for p in found] == [
        ("draft-tensor-shape", "fc.weight", str([HIDDEN, 2 * HIDDEN]))]


def test_a_missing_decoder_tensor_is_named(tmp_path: Path) -> None:
    gone = "layers.0.self_attn.k_norm.weight"
    draft = write_draft(tmp_path / "draft",
                        tensors={n: s for n, s in VLLM_026_TENSORS.items() if n != gone})
    assert [(p.code, p.subject) for p in verify_checkpoint(draft).problems] == [
        ("draft-tensor-missing", gone)]


def test_midlayer_names_load_as_layer_0(tmp_path: Path) -> None:
    tensors = {n.replace("layers.0.", "midlayer."): s for n, s in VLLM_026_TENSORS.items()}
    assert codes(write_draft(tmp_path / "draft", tensors=tensors)) == []


def test_a_reduced_draft_vocabulary_needs_d2t(tmp_path: Path) -> None:
    config = draft_config(draft_vocab_size=VOCAB // 2)
    tensors = {**VLLM_026_TENSORS, "markov_head.markov_w2.weight": [VOCAB // 2, RANK]}
    assert [(p.code, p.subject) for p in
            verify_checkpoint(write_draft(tmp_path / "a", config, tensors)).problems] == [
        ("draft-tensor-missing", "d2t")]
    assert codes(write_draft(tmp_path / "b", config, {**tensors, "d2t": [VOCAB // 2]})) == []


def test_the_profile_refuses_a_checkpoint_that_is_no_qwen3_dspark_draft(tmp_path: Path) -> None:
    ckpt = build_checkpoint(tmp_path / "dsv4")
    done = cli("model=qwen3_dspark_draft", f"model.path={ckpt}", "--json", cwd=tmp_path)
    assert done.returncode == 1
    assert {p["code"] for p in json.loads(done.stdout)["problems"]} == {"pin-mismatch"}


def test_a_declared_confidence_head_passes(tmp_path: Path) -> None:
    draft = write_draft(tmp_path / "draft", draft_config(**WITH_HEAD), head=head_tensors())
    done = cli("model=qwen3_dspark_draft", f"model.path={draft}", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["head_verified"] is True and report["confidence_head"] is True
    table = cli("model=qwen3_dspark_draft", f"model.path={draft}", cwd=tmp_path).stdout
    assert "Markov head, confidence head and every tensor" in table


def test_a_draft_without_a_declared_head_passes_and_says_so(tmp_path: Path) -> None:
    """vLLM builds no head unless config.json asks: a fixed-K draft, verified as such."""
    done = cli("model=qwen3_dspark_draft", f"model.path={write_draft(tmp_path / 'draft')}",
               "--json", cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout)["confidence_head"] is False


@pytest.mark.parametrize("gone", [HEAD_WEIGHT, HEAD_BIAS])
def test_a_declared_head_without_its_tensor_fails_closed(tmp_path: Path, gone: str) -> None:
    head = {n: t for n, t in head_tensors().items() if n != gone}
    draft = write_draft(tmp_path / "draft", draft_config(**WITH_HEAD), head=head)
    before = fingerprint(draft)
    done = cli("model=qwen3_dspark_draft", f"model.path={draft}", "--json", cwd=tmp_path)
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["head_verified"] is False and report["checks"]["head"] == "failed"
    assert [(p["code"], p["subject"]) for p in report["problems"]] == [
        ("confidence-head-missing", gone)]
    assert "adaptive verification refuses to boot" in report["problems"][0]["hint"]
    assert fingerprint(draft) == before


@pytest.mark.parametrize(("with_markov", "width", "expected"), [
    (True, HIDDEN, [1, HIDDEN + RANK]),  # the Markov embedding's part left out
    (False, HIDDEN + RANK, [1, HIDDEN]),  # the head reads the hidden state alone
])
def test_a_confidence_head_of_another_width_is_refused(tmp_path: Path, with_markov: bool,
                                                       width: int, expected: list[int]) -> None:
    config = draft_config(enable_confidence_head=True, confidence_head_with_markov=with_markov)
    found = verify_checkpoint(write_draft(tmp_path / "draft", config,
                                          head=head_tensors(width))).problems
    assert [(p.code, p.subject, p.actual) for p in found] == [
        ("confidence-head-shape", HEAD_WEIGHT, str([1, width]))]
    assert found[0].expected.startswith(str(expected))


def test_a_confidence_head_of_integers_or_nan_is_refused(tmp_path: Path) -> None:
    config = draft_config(**WITH_HEAD)
    ints = write_draft(tmp_path / "ints", config, head=head_tensors(dtype="I32"))
    nan = write_draft(tmp_path / "nan", config, head=head_tensors(values=float("nan")))
    assert codes(ints) == ["confidence-head-dtype"]
    assert codes(nan) == ["confidence-head-not-finite"]


def test_a_head_switch_that_is_no_bool_is_refused(tmp_path: Path) -> None:
    """vLLM reads the switch by truth value: the string "false" would build the head."""
    config = draft_config(enable_confidence_head="false")
    found = verify_checkpoint(write_draft(tmp_path / "draft", config)).problems
    assert [(p.code, p.subject) for p in found] == [
        ("dspark-key-invalid", "enable_confidence_head")]


def qwen3_target(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(
        {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}))
    write_shard(root / "model.safetensors", {"lm_head.weight": ("BF16", np.zeros((4, 4),
                                                                                 np.uint16))})
    return root


def adaptive_dry_run(tmp_path: Path, draft: Path, *extra: str) -> subprocess.CompletedProcess:
    from tests.conftest import run_dspark

    target = tmp_path / "target"
    if not target.exists():
        qwen3_target(target)
    return run_dspark("serve", "+hw=h200", "hw.num_gpus=1", "model=tiny_qwen3",
                      f"model.path={target}", f"model.draft={draft}",
                      "speculative=dspark_adaptive", f"speculative.model={draft}", "--dry-run",
                      *extra, cwd=tmp_path)


def test_adaptive_with_a_headless_draft_is_refused_before_boot(tmp_path: Path) -> None:
    """The draft's config declares the head, its tensors are absent: vLLM 0.28 would load both
    models and then refuse at boot; dspark refuses in preflight (exit 1), naming the tensor."""
    draft = write_draft(tmp_path / "draft", draft_config(**WITH_HEAD))
    done = adaptive_dry_run(tmp_path, draft)
    assert done.returncode == 1, done.stderr
    assert "checkpoint-confidence-head FAILED" in done.stderr
    assert f"{HEAD_WEIGHT}: expected a tensor of shape [1, {HIDDEN + RANK}]" in done.stderr
    assert "checks.allow_missing_confidence_head=true" in done.stderr


def test_adaptive_with_a_draft_that_declares_no_head_is_refused(tmp_path: Path) -> None:
    done = adaptive_dry_run(tmp_path, write_draft(tmp_path / "draft"))
    assert done.returncode == 1, done.stderr
    assert "enable_confidence_head is not true" in done.stderr


def test_the_headless_draft_passes_fixed_k_and_the_override(tmp_path: Path) -> None:
    from tests.conftest import run_dspark

    draft = write_draft(tmp_path / "draft", draft_config(**WITH_HEAD))
    overridden = adaptive_dry_run(tmp_path, draft, "checks.allow_missing_confidence_head=true")
    assert overridden.returncode == 0, overridden.stderr
    assert ("checkpoint-confidence-head skipped: OVERRIDDEN by "
            "checks.allow_missing_confidence_head=true") in overridden.stderr
    fixed = run_dspark("serve", "+hw=h200", "hw.num_gpus=1", "model=tiny_qwen3",
                       f"model.path={tmp_path / 'target'}", f"model.draft={draft}",
                       "speculative=dspark_draft", "--dry-run", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr


def test_adaptive_with_the_head_passes_the_rule(tmp_path: Path) -> None:
    draft = write_draft(tmp_path / "draft", draft_config(**WITH_HEAD), head=head_tensors())
    done = adaptive_dry_run(tmp_path, draft, "--json")
    assert done.returncode == 0, done.stderr
    assert '"rule": "checkpoint-confidence-head",\n      "status": "passed"' in done.stdout


@pytest.mark.vllm
def test_the_tiny_pair_maker_writes_what_the_profiles_pass(tmp_path: Path) -> None:
    """The maker (torch, transformers) writes a Qwen3 target and a draft whose tensors are
    the ones vLLM 0.26 loads; both pass verify-checkpoint."""
    from dspark_cli.vllm.tiny_model import build_qwen3_dspark

    target, draft = build_qwen3_dspark(tmp_path / "target", tmp_path / "draft-dspark")
    config = json.loads((draft / "config.json").read_text())
    assert config["architectures"] == ["Qwen3DSparkModel"] and config["markov_rank"] > 0
    assert config["dspark_block_size"] == 4
    tokenizer = json.loads((draft / "tokenizer.json").read_text())
    mask = config["dflash_config"]["mask_token_id"]
    assert {t["id"]: t["content"] for t in tokenizer["added_tokens"]}[mask] == "<|mask|>"
    assert config["enable_confidence_head"] is True and config["confidence_head_with_markov"]
    report = json.loads(cli("model=qwen3_dspark_draft", f"model.path={draft}", "--json",
                            cwd=tmp_path).stdout)
    assert report["ok"] is True and report["confidence_head"] is True
    target_report = json.loads(cli("model=local", f"model.path={target}", "--json",
                                   cwd=tmp_path).stdout)
    assert target_report["ok"] is True and target_report["dspark"] is False
    # The head's confidences vary with the previous token (its Markov part) and the hidden state.
    from safetensors import safe_open

    with safe_open(str(draft / "model.safetensors"), "np") as shard:
        weight, bias = (shard.get_tensor(f"confidence_head.proj.{n}") for n in ("weight", "bias"))
    assert weight.dtype == bias.dtype == np.float32 and bias.shape == (1,)
    hidden = config["hidden_size"]
    assert weight.shape == (1, hidden + config["markov_rank"])
    with np.errstate(over="ignore"):
        by_token = 1 / (1 + np.exp(-(weight[0, hidden:] + bias[0])))
    some = by_token[by_token > 0]
    assert 0.15 < some.min() < 0.25 and 0.9 < some.max() < 0.97
    # One previous token in seven gives exactly 0: adaptive verification never keeps the slots
    # after it, whatever the step costs, so its verify widths vary.
    assert np.array_equal(by_token == 0, np.arange(len(by_token)) % 7 == 6)
    assert np.abs(weight[0, :hidden]).max() > 0
    # Without the head: config.json still declares it, the tensors are absent, verify fails.
    maker = [sys.executable, "-m", "dspark_cli.vllm.tiny_model", "qwen3-dspark"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    bare = tmp_path / "draft-bare"
    made = subprocess.run([*maker, str(target), str(bare), "--no-confidence-head"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert made.returncode == 0, made.stderr
    assert json.loads((bare / "config.json").read_text())["enable_confidence_head"] is True
    refused = json.loads(cli("model=qwen3_dspark_draft", f"model.path={bare}", "--json",
                             cwd=tmp_path).stdout)
    assert [p["subject"] for p in refused["problems"]] == [
        "confidence_head.proj.weight", "confidence_head.proj.bias"]
    # Asked for the other kind at a directory that holds one: refused, nothing changed.
    before = fingerprint(bare)
    again = subprocess.run([*maker, str(target), str(bare)], capture_output=True, text=True,
                           env=env, timeout=300)
    assert again.returncode == 2 and "without the confidence head" in again.stderr
    assert "Traceback" not in again.stderr and fingerprint(bare) == before


# vLLM's own confidence head class and weight loader, on CPU (a TP group of one over gloo):
# the class is the same in vLLM 0.28 and the 0.32 installed here (its `load_weights` names the
# tensors `confidence_head.*` under `model.`). Prints the names loaded, then the confidences for
# the tokens after 4 .. 17 and random hidden states.
LOAD_HEAD = """
import json, socket, sys
import torch
from safetensors.torch import load_file
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.model_executor.models.qwen3_dspark import DSparkConfidenceHead
from vllm.model_executor.models.utils import AutoWeightsLoader

draft = sys.argv[1]
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
with set_current_vllm_config(VllmConfig()):
    init_distributed_environment(1, 0, f"tcp://127.0.0.1:{port}", 0, "gloo")
    initialize_model_parallel(1, 1)
    cfg = json.load(open(f"{draft}/config.json"))
    markov = cfg["confidence_head_with_markov"]
    module = torch.nn.Module()
    module.confidence_head = DSparkConfidenceHead(
        cfg["hidden_size"] + (cfg["markov_rank"] if markov else 0), "confidence_head",
        bias=True, with_markov=markov)
    tensors = load_file(f"{draft}/model.safetensors")
    print(json.dumps(sorted(AutoWeightsLoader(module).load_weights(
        (n, t) for n, t in tensors.items() if n.startswith("confidence_head.")))))
    proj = module.confidence_head.proj
    proj.quant_method.process_weights_after_loading(proj)
    torch.manual_seed(0)
    hidden = torch.randn(14, cfg["hidden_size"]).to(torch.bfloat16)
    embed = tensors["markov_head.markov_w1.weight"][torch.arange(4, 18)]
    print(json.dumps(torch.sigmoid(module.confidence_head(hidden, embed)).tolist()))
"""


@pytest.mark.vllm
def test_vllms_own_confidence_head_loads_the_tiny_drafts_head(tmp_path: Path) -> None:
    """The tensors the maker writes are what vLLM's DSparkConfidenceHead loads (names, shapes,
    dtypes through its weight loader), and its confidences vary by token: exactly 0 after one
    token in seven, between about 0.2 and 0.95 otherwise."""
    from dspark_cli.vllm.tiny_model import build_qwen3_dspark

    _, draft = build_qwen3_dspark(tmp_path / "target", tmp_path / "draft")
    done = subprocess.run([sys.executable, "-c", LOAD_HEAD, str(draft)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    names, confidences = (json.loads(line) for line in done.stdout.splitlines()[-2:])
    assert names == ["confidence_head.proj.bias", "confidence_head.proj.weight"]
    zero = [c for i, c in zip(range(4, 18), confidences, strict=True) if i % 7 == 6]
    assert zero == [0.0, 0.0]
    rest = [c for i, c in zip(range(4, 18), confidences, strict=True) if i % 7 != 6]
    assert 0.1 < min(rest) < 0.35 and 0.85 < max(rest) < 0.99
    assert len({round(c, 2) for c in rest}) >= 6
