"""Checks on the plan, the machine and the checkpoint, run before anything boots.

Each rule is a small data-driven record: what it needs (plan only, or the machine), the config
key a user changes to fix it, and a function returning a failure message or None. A dry run
runs the plan-only rules and reports the others as skipped.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from dspark_cli.config.choices import Platform
from dspark_cli.launch.capture_sizes import coverage
from dspark_cli.launch.effective import EffectiveLaunch
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.profile import Profile
from dspark_cli.status import Finding, Status

if TYPE_CHECKING:  # detection (subprocess, sysfs) is not needed to plan
    from dspark_cli.machine.detect import Machine

ADAPTIVE_INCOMPATIBLE_ARGS = ("enable_return_routed_experts", "enable_batch_sharded_sampling")
# vLLM's SpeculativeConfig re-detects the method from these words in a draft model's path.
METHOD_RENAMING_WORDS = ("eagle-", "eagle3", "dflash", "dspark")


@dataclass(frozen=True)
class Context:
    """What the rules judge: the plan (the launch as rendered, `launch`, and the profile facts
    that are not part of the command: `plan.profile`) and the machine."""

    plan: LaunchPlan
    machine: Machine | None

    @property
    def profile(self) -> Profile:
        return self.plan.profile

    @cached_property
    def launch(self) -> EffectiveLaunch:
        return EffectiveLaunch.of(self.plan)

    @property
    def adaptive(self) -> bool:
        return self.launch.adaptive

    @property
    def method(self) -> str | None:
        return self.launch.method

    @property
    def parallel(self) -> int:
        return self.launch.parallel

    @property
    def world(self) -> int:
        """TP x DP x PP as vLLM counts it across every node: the plan's own for one node; for
        several, the head's command in the plan's layout (DP = nodes x local DP; TP across
        nodes is the engine's total)."""
        if self.plan.layout.nodes <= 1:
            return self.parallel
        return self.plan.layout.head.world_size


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    key: str
    check: Callable[[Context], str | None]
    needs_machine: bool = False
    # Whether the rule concerns this plan at all: a dry run does not mention one that does not
    # (a rule on the aiter backend, for a plan that uses marlin). None: it always does.
    applies: Callable[[Context], bool] | None = None


def _adaptive_method(c: Context) -> str | None:
    if c.adaptive and c.method != "dspark":
        return f"adaptive verification is only implemented for method dspark, not {c.method!r}"
    return None


def _adaptive_cudagraphs(c: Context) -> str | None:
    mode = c.launch.cudagraph_mode
    if c.adaptive and not c.launch.full_cudagraphs:
        shown = mode or "unset"
        return (f"adaptive verification requires full CUDA graphs (FULL, FULL_DECODE_ONLY or "
                f"FULL_AND_PIECEWISE); cudagraph_mode is {shown}: use "
                "compilation=full_and_piecewise or disable adaptive verification")
    return None


def _adaptive_eager(c: Context) -> str | None:
    if c.adaptive and c.launch.eager:
        return "adaptive verification needs CUDA graphs, and --enforce-eager turns them off"
    return None


def _adaptive_pp(c: Context) -> str | None:
    if c.adaptive and c.launch.size("pipeline_parallel_size") > 1:
        return "adaptive verification is not compatible with pipeline parallelism"
    return None


def _adaptive_lora(c: Context) -> str | None:
    if c.adaptive and c.launch.arg("enable_lora") is True:
        return "adaptive verification is not compatible with LoRA"
    return None


def _adaptive_flags(c: Context) -> str | None:
    bad = [a for a in ADAPTIVE_INCOMPATIBLE_ARGS if c.launch.arg(a) is True]
    bad += (["use_local_argmax_reduction"]
            if c.launch.speculative.get("use_local_argmax_reduction") else [])
    if c.adaptive and bad:
        return f"adaptive verification is not compatible with {', '.join(bad)}"
    return None


def _adaptive_in_vllm(c: Context) -> str | None:
    """The installed vLLM must know the field: vLLM 0.26 has DSpark with a fixed K only, and
    would refuse the unknown key at startup, after the model has loaded."""
    if not c.adaptive:
        return None
    from dspark_cli.launch.runtime import installed_vllm
    from dspark_cli.vllm.options import has_field

    vllm = installed_vllm()
    if vllm is None or has_field("enable_adaptive_verification"):
        return None  # no vLLM here to judge (a laptop's dry run), or it has the field
    return (f"the installed {vllm.describe()} ({vllm.dist}) has no adaptive verification "
            "(its SpeculativeConfig lacks enable_adaptive_verification: it came with vLLM "
            "0.27); use speculative=dspark_fixed, DSpark with a fixed K")


def _v2_runner(c: Context) -> str | None:
    if c.method == "dspark" and c.launch.env.get(
            "VLLM_USE_V2_MODEL_RUNNER") != "1":
        return ("DSpark and adaptive verification need the V2 model runner "
                "(VLLM_USE_V2_MODEL_RUNNER=1); the V1 runner refuses them at startup")
    return None


def _dspark_k(c: Context) -> str | None:
    k = c.launch.num_speculative_tokens
    if c.method == "dspark" and c.launch.draft_model is None and not k:
        return "method dspark without a draft model needs num_speculative_tokens (K > 0)"
    return None


def _dspark_topk(c: Context) -> str | None:
    if "dspark_draft_topk" not in c.launch.speculative:
        return None
    if c.method != "dspark":
        return "dspark_draft_topk is only supported by DSpark"
    if c.profile.family == "deepseek_v4":
        return "dspark_draft_topk is for Qwen3 DSpark only and is invalid for DeepSeek-V4"
    return None


def _dspark_platform(c: Context) -> str | None:
    if c.method == "dspark" and c.profile.platform is Platform.cpu:
        return "DSpark is not implemented on CPU; use speculative=draft_model or ngram"
    return None


def _draft_path_method(c: Context) -> str | None:
    draft = c.launch.draft_model
    if c.method != "draft_model" or not draft:
        return None
    hit = next((w for w in METHOD_RENAMING_WORDS if w in str(draft).lower()), None)
    if hit:
        return (f"vLLM switches method draft_model to another method when the draft path "
                f"contains {hit!r} ({draft}); move or link the draft model to a path "
                "without it")
    return None


def _sparse_mla_fp8(c: Context) -> str | None:
    kv = c.launch.arg("kv_cache_dtype")
    if c.profile.family == "deepseek_v4" and kv != "fp8":
        return f"DeepSeek-V4's sparse MLA needs an fp8 KV cache, not {kv or 'auto'}"
    return None


def _graphs_cover_batches(c: Context) -> str | None:
    blackwell = any(re.search(r"B[23]00", p, re.IGNORECASE) for p in c.profile.detect)
    found = coverage(c.launch, blackwell)
    return found.problem() if found is not None else None


def _fits_profile(c: Context) -> str | None:
    hw = c.profile
    nodes = hw.nodes
    gpus = hw.num_gpus * max(nodes, 1)
    if hw.platform is not Platform.cpu and c.world > gpus:
        where = (f"the {hw.hw_name} profile has ({gpus})" if nodes <= 1 else
                 f"{nodes} nodes of the {hw.hw_name} profile have ({nodes} x {hw.num_gpus})")
        return f"TP x DP x PP = {c.world} needs more GPUs than {where}"
    return None


def _platform_matches(c: Context) -> str | None:
    want, have = c.profile.platform, c.machine.platform
    if want != have:
        return (f"the {c.profile.hw_name} profile is for {want.value}, but this machine is "
                f"{have.value}; pick +hw=<profile> for this machine, or use --dry-run to only "
                "print the plan")
    return None


def _gpus_match(c: Context) -> str | None:
    patterns = list(c.profile.detect)
    gpus = c.machine.gpus
    if not gpus or not patterns:
        return None
    seen = [v for g in gpus for v in (g.name, g.arch) if v]
    if not any(re.search(p, v, re.IGNORECASE) for p in patterns for v in seen):
        names = ", ".join(sorted({g.name for g in gpus}))
        return (f"the {c.profile.hw_name} profile is for GPUs matching {patterns}, but this "
                f"machine has {names}; pick the profile for this machine (or leave +hw out to "
                "detect it)")
    return None


def _fits_machine(c: Context) -> str | None:
    # every node of a layout run here (deploy=local) shares this machine's GPUs
    if c.profile.platform is not Platform.cpu and c.world > len(c.machine.gpus):
        return (f"TP x DP x PP = {c.world} needs {c.world} GPUs; "
                f"{len(c.machine.gpus)} detected")
    return None


def _aiter_rocm(c: Context) -> str | None:
    backend = str(c.launch.arg("moe_backend") or "")
    if backend.startswith("aiter") and c.profile.platform is not Platform.rocm:
        return (f"--moe-backend {backend} needs ROCm; {c.profile.hw_name} is "
                f"{c.profile.platform.value}")
    return None


def _aiter_importable(c: Context) -> str | None:
    backend = str(c.launch.arg("moe_backend") or "")
    if backend.startswith("aiter") and importlib.util.find_spec("aiter") is None:
        return f"--moe-backend {backend} needs AITER, and `import aiter` finds nothing here"
    return None


RULES: tuple[Rule, ...] = (
    Rule("adaptive-needs-dspark", "adaptive verification needs method dspark",
         "speculative", _adaptive_method),
    Rule("adaptive-needs-full-cudagraphs", "adaptive verification needs full CUDA graphs",
         "compilation", _adaptive_cudagraphs),
    Rule("adaptive-no-eager", "adaptive verification cannot run eager",
         "compilation.enforce_eager", _adaptive_eager),
    Rule("adaptive-no-pipeline-parallel", "adaptive verification excludes pipeline parallelism",
         "hw.args.pipeline_parallel_size", _adaptive_pp),
    Rule("adaptive-no-lora", "adaptive verification excludes LoRA",
         "serving.args.enable_lora", _adaptive_lora),
    Rule("adaptive-incompatible-options", "adaptive verification excludes some options",
         "serving.extra_args", _adaptive_flags),
    Rule("adaptive-in-installed-vllm", "the installed vLLM has adaptive verification",
         "speculative", _adaptive_in_vllm),
    Rule("dspark-needs-v2-runner", "DSpark needs the V2 model runner",
         "speculative.env.VLLM_USE_V2_MODEL_RUNNER", _v2_runner),
    Rule("dspark-needs-k", "DSpark needs num_speculative_tokens",
         "speculative.num_speculative_tokens", _dspark_k),
    Rule("dspark-draft-topk", "dspark_draft_topk only for Qwen3 DSpark",
         "speculative.extra.dspark_draft_topk", _dspark_topk),
    Rule("dspark-not-on-cpu", "DSpark needs a GPU platform", "speculative", _dspark_platform),
    Rule("draft-path-keeps-method", "a draft model's path does not rename its method",
         "speculative.model", _draft_path_method),
    Rule("sparse-mla-fp8-kv", "DeepSeek-V4 sparse MLA needs an fp8 KV cache",
         "model.args.kv_cache_dtype", _sparse_mla_fp8),
    Rule("cudagraphs-cover-spec-batches",
         "CUDA graphs cover max_num_seqs x (1 + K) tokens (capture_sizes.py)",
         "compilation.max_cudagraph_capture_size", _graphs_cover_batches),
    Rule("parallel-fits-profile", "TP x DP x PP fits the profile's GPUs",
         "hw.args.tensor_parallel_size", _fits_profile),
    Rule("aiter-needs-rocm", "the aiter MoE backends need ROCm",
         "hw.args.moe_backend", _aiter_rocm),
    Rule("platform-matches-machine", "the profile's platform is this machine's",
         "+hw", _platform_matches, needs_machine=True),
    Rule("gpus-match-profile", "the GPUs detected are the profile's",
         "+hw", _gpus_match, needs_machine=True, applies=lambda c: bool(c.profile.detect)),
    Rule("parallel-fits-machine", "TP x DP x PP fits the GPUs detected",
         "hw.args.tensor_parallel_size", _fits_machine, needs_machine=True,
         applies=lambda c: c.profile.platform is not Platform.cpu),
    Rule("aiter-importable", "the aiter MoE backends need an importable aiter",
         "hw.args.moe_backend", _aiter_importable, needs_machine=True,
         applies=lambda c: str(c.launch.arg("moe_backend") or "").startswith("aiter")),
)


def run_rules(ctx: Context, rules: Iterable[Rule] = RULES) -> tuple[Finding, ...]:
    """Every rule's finding; machine rules are skipped when no machine facts are given."""
    findings = []
    for rule in rules:
        if rule.needs_machine and ctx.machine is None:
            if rule.applies is not None and not rule.applies(ctx):
                findings.append(Finding(rule.id, Status.skipped, rule.summary, rule.key,
                                        applies=False))
            else:
                findings.append(Finding(rule.id, Status.skipped,
                                        f"not checked in a dry run: {rule.summary}", rule.key))
            continue
        problem = rule.check(ctx)
        status = Status.failed if problem else Status.passed
        findings.append(Finding(rule.id, status, problem or rule.summary, rule.key))
    return tuple(findings)
