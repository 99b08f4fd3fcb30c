"""The preflight rules: checks on the plan and the machine, run before anything boots.

Each rule is a small data-driven record: what it needs (plan only, or the machine), the config
key a user changes to fix it, and a function returning a failure message or None. A dry run
runs the plan-only rules and reports the others as skipped.

A multi-node layout has rules of its own (`LAYOUT_RULES`), judged on the rendered `NodeLayout`
each node will run, so a flag slipped in through a free-form map is judged like any other. A
bad layout is a config error: `checked_layout` reports every failure and raises UsageError
(exit 2) before anything is written or started. One node has no layout to judge.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from dspark_cli.config.choices import Platform
from dspark_cli.errors import UsageError
from dspark_cli.launch.effective import EffectiveLaunch, coverage
from dspark_cli.launch.layout import HEAD_ADDR, NodeLaunch, NodeLayout
from dspark_cli.launch.plan import LaunchPlan, Profile, build_plan
from dspark_cli.launch.runtime import installed_vllm
from dspark_cli.status import Finding, Status
from dspark_cli.vllm.options import has_field

if TYPE_CHECKING:  # detection (subprocess, sysfs) is not needed to plan
    from dspark_cli.config.schema import LaunchConf
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


# The first vLLM with adaptive verification (`enable_adaptive_verification` in its
# config/speculative.py, v1/worker/gpu/spec_decode/adaptive_verification.py): 0.26 and 0.27.x
# have DSpark with a fixed K only.
ADAPTIVE_SINCE_VLLM = "0.28.0"


def _adaptive_in_vllm(c: Context) -> str | None:
    """The installed vLLM must know the field: vLLM 0.26 and 0.27 have DSpark with a fixed K
    only, and would refuse the unknown key at startup, after the model has loaded."""
    if not c.adaptive:
        return None
    vllm = installed_vllm()
    if vllm is None or has_field("enable_adaptive_verification"):
        return None  # no vLLM here to judge (a laptop's dry run), or it has the field
    return (f"the installed {vllm.describe()} ({vllm.dist}) has no adaptive verification "
            "(its SpeculativeConfig lacks enable_adaptive_verification: it came with vLLM "
            f"{ADAPTIVE_SINCE_VLLM}); use speculative=dspark_fixed, DSpark with a fixed K")


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
    assert c.machine is not None  # a needs_machine rule: judged only with a machine
    want, have = c.profile.platform, c.machine.platform
    if want != have:
        return (f"the {c.profile.hw_name} profile is for {want.value}, but this machine is "
                f"{have.value}; pick +hw=<profile> for this machine, or use --dry-run to only "
                "print the plan")
    return None


def _gpus_match(c: Context) -> str | None:
    patterns = list(c.profile.detect)
    assert c.machine is not None  # a needs_machine rule: judged only with a machine
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
    assert c.machine is not None  # a needs_machine rule: judged only with a machine
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
         "CUDA graphs cover max_num_seqs x (1 + K) tokens (effective.py)",
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


# -- the rules of a multi-node layout ------------------------------------------------------
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


@dataclass(frozen=True)
class LayoutContext:
    profile: Profile
    layout: NodeLayout


@dataclass(frozen=True)
class LayoutRule:
    id: str
    summary: str
    key: str
    # A problem (or a problem and the key to change, where it depends on the case), or None.
    check: Callable[[LayoutContext], str | tuple[str, str] | None]


def _size(node: NodeLaunch, dest: str) -> int:
    return int(node.arg(dest) or 1)


def _world_divides(c: LayoutContext) -> str | None:
    world, nodes = c.layout.head.world_size, c.layout.nodes
    if world % nodes:
        return (f"TP x DP x PP = {world} does not divide over {nodes} nodes; vLLM refuses "
                f"`--nnodes {nodes}` unless it divides the world size")
    return None


def _sizes_multiply(c: LayoutContext) -> str | None:
    lay = c.layout
    if lay.mode == "tp":
        ranks = [n.arg("node_rank") for n in lay.launches]
        nnodes = {n.arg("nnodes") for n in lay.launches}
        if nnodes != {lay.nodes} or ranks != list(range(lay.nodes)):
            return (f"--nnodes {sorted(map(str, nnodes))} and --node-rank {ranks} do not "
                    f"number {lay.nodes} nodes 0..{lay.nodes - 1}")
        return None
    sizes = {n.arg("data_parallel_size") for n in lay.launches}
    local = {n.arg("data_parallel_size_local") for n in lay.launches}
    want = lay.nodes * lay.local_dp
    if sizes != {want} or local != {lay.local_dp}:
        return (f"DP size {sorted(map(str, sizes))} with local DP {sorted(map(str, local))} "
                f"on {lay.nodes} nodes; it must be nodes x local DP = {want} on every node")
    starts = [n.arg("data_parallel_start_rank") or 0 for n in lay.launches]
    if starts != [r * lay.local_dp for r in range(lay.nodes)]:
        return (f"DP start ranks {starts} do not step by the local DP size {lay.local_dp}; "
                "two nodes would claim the same engine ranks")
    return None


def _gpus_per_node(c: LayoutContext) -> str | None:
    hw = c.profile
    if hw.platform is Platform.cpu:
        return None
    per_node, _ = divmod(c.layout.head.world_size, c.layout.nodes)
    if per_node != hw.num_gpus:
        fix = ("set hw.args.tensor_parallel_size to the engine's total TP "
               f"({hw.num_gpus * c.layout.nodes} for {c.layout.nodes} nodes)"
               if c.layout.mode == "tp" else "make TP x local DP x PP the node's GPU count")
        return (f"{c.layout.mode} over {c.layout.nodes} nodes puts {per_node} GPUs on each "
                f"node, but the {hw.hw_name} profile has {hw.num_gpus} per node; {fix}")
    return None


def _hybrid_not_headless(c: LayoutContext) -> str | None:
    bad = [n.rank for n in c.layout.launches if n.arg("data_parallel_hybrid_lb") and n.headless]
    if bad:
        return (f"nodes {bad} run --data-parallel-hybrid-lb with --headless; in hybrid load "
                "balancing every node serves the API (vLLM refuses the pair)")
    return None


MOE_FAMILIES = ("deepseek_v4",)  # model families known to be mixture-of-experts


def _hybrid_local_dp(c: LayoutContext) -> str | None:
    moe = c.profile.family in MOE_FAMILIES
    if c.layout.mode == "dp_hybrid" and c.layout.local_dp < 2 and not moe:
        return ("hybrid load balancing with one DP rank per node: vLLM switches it to external "
                "load balancing, which only MoE models accept; set hw.args.data_parallel_size "
                "(ranks per node) to 2 or more, or use hw.layout=dp")
    return None


def _head_serves(c: LayoutContext) -> str | None:
    head = c.layout.head
    if head.headless or not head.serves_api:
        return "the head node (rank 0) runs --headless, so no node would serve the API"
    headless = [n.rank for n in c.layout.launches[1:] if n.serves_api == n.headless]
    if headless:
        return f"nodes {headless} neither serve the API nor run --headless"
    return None


def _valid_address(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return bool(_HOSTNAME.match(address))
    return True


def _head_address(c: LayoutContext) -> str | None:
    address = c.layout.head_address
    if address is not None and not _valid_address(address):
        return (f"hw.head_address={address!r} is neither an IP address nor a host name "
                f"(leave it null to take the head's address at run time, {HEAD_ADDR})")
    return None


def _ports(c: LayoutContext) -> tuple[str, str] | None:
    hw, lay = c.profile, c.layout
    own = "hw.master_port" if lay.mode == "tp" else "hw.dp_rpc_port"
    named = {own: (own, hw.master_port if lay.mode == "tp" else hw.dp_rpc_port)}
    named |= {f"the API port of node {n.rank}": ("server.port", int(n.api_port))
              for n in lay.launches if n.api_port is not None}
    for name, (key, port) in named.items():
        if not 0 < port < 65536:
            return f"{name} is {port}, outside 1..65535", key
    seen: dict[int, str] = {}
    for name, (key, port) in named.items():
        if port in seen:
            return (f"{name} and {seen[port]} are both {port}; nodes may share a host, so "
                    "every port must be distinct", key)
        seen[port] = name
    return None


def _adaptive_every_node(c: LayoutContext) -> tuple[str, str] | None:
    """The key named is the one that makes a node break the rule: the PP size, or eager mode."""
    problems, keys = [], []
    for node in c.layout.launches:
        spec = node.arg("speculative_config") or {}
        if not spec.get("enable_adaptive_verification"):
            continue
        if _size(node, "pipeline_parallel_size") > 1:
            problems.append(f"node {node.rank} runs pipeline parallelism")
            keys.append("hw.args.pipeline_parallel_size")
        if node.arg("enforce_eager"):
            problems.append(f"node {node.rank} runs --enforce-eager")
            keys.append("compilation.enforce_eager")
    if problems:
        return ("DSpark adaptive verification excludes pipeline parallelism and eager mode on "
                "every node: " + "; ".join(problems), keys[0])
    return None


def _tp_backend(c: LayoutContext) -> str | None:
    backend = c.layout.head.arg("data_parallel_backend")
    if c.layout.mode == "tp" and backend not in (None, "mp"):
        return f"vLLM runs --nnodes > 1 only with --data-parallel-backend mp, not {backend}"
    return None


LAYOUT_RULES: tuple[LayoutRule, ...] = (
    LayoutRule("layout-world-divides-nodes", "the world size divides over the nodes",
               "hw.args.tensor_parallel_size", _world_divides),
    LayoutRule("layout-sizes-multiply", "DP size = nodes x local DP; ranks number the nodes",
               "hw.nodes", _sizes_multiply),
    LayoutRule("layout-gpus-per-node", "each node gets the profile's GPUs",
               "hw.args.tensor_parallel_size", _gpus_per_node),
    LayoutRule("layout-hybrid-not-headless", "hybrid load balancing is not headless",
               "hw.layout", _hybrid_not_headless),
    LayoutRule("layout-hybrid-local-dp",
               "hybrid load balancing of a dense model needs 2+ DP ranks per node",
               "hw.args.data_parallel_size", _hybrid_local_dp),
    LayoutRule("layout-head-serves-api", "the head serves the API, the others are headless",
               "hw.layout", _head_serves),
    LayoutRule("layout-head-address", "the head's address is an address",
               "hw.head_address", _head_address),
    LayoutRule("layout-ports", "the layout's ports are set and distinct",
               "hw.dp_rpc_port", _ports),
    LayoutRule("layout-adaptive-every-node", "adaptive verification's rules hold on every node",
               "hw.args.pipeline_parallel_size", _adaptive_every_node),
    LayoutRule("layout-tp-needs-mp", "TP across nodes needs the mp DP backend",
               "serving.extra_args.data_parallel_backend", _tp_backend),
)


def layout_findings(plan: LaunchPlan, layout: NodeLayout | None = None) -> tuple[Finding, ...]:
    """Every layout rule's finding on the plan's layout (or `layout`, judged with the plan's
    profile); none for one node."""
    layout = plan.layout if layout is None else layout
    if layout.nodes == 1:
        return ()
    ctx = LayoutContext(plan.profile, layout)
    findings = []
    for rule in LAYOUT_RULES:
        problem, key = rule.check(ctx), rule.key
        if isinstance(problem, tuple):
            problem, key = problem
        findings.append(Finding(rule.id, Status.failed if problem else Status.passed,
                                problem or rule.summary, key))
    return tuple(findings)


def checked_plan(cfg: LaunchConf) -> LaunchPlan:
    """The config's launch plan, refused (UsageError) when its node layout breaks a rule: what
    every command plans before it prints or starts anything."""
    plan = build_plan(cfg)
    checked_layout(plan)
    return plan


def checked_layout(plan: LaunchPlan) -> NodeLayout:
    """The plan's node layout, or UsageError naming the keys of every rule it breaks."""
    layout = plan.layout
    failed = [f for f in layout_findings(plan) if f.failed]
    if failed:
        lines = "; ".join(f"{f.rule}: {f.message} (change `{f.key}`)" for f in failed)
        raise UsageError(f"the {layout.mode} layout over {layout.nodes} nodes is not valid: "
                         f"{lines}. Nothing was started.")
    return layout
