"""One dataclass schema per config group: a typo'd key, a wrong type or an unknown option fails
while Hydra composes, before anything runs.

Fields under `args` are vLLM `serve` options named by their argparse dest (snake_case); a null
value is not rendered, so a profile says only what it changes from vLLM's defaults.
The closed sets of values a key takes (platform, layout...) are in choices.py.
"""

# No `from __future__ import annotations`: OmegaConf reads every field's type with
# get_type_hints, which compiles each annotation kept as a string.
from dataclasses import field
from typing import Any

from omegaconf import MISSING

from dspark_cli.config.choices import CudagraphMode, DraftTokensRule, Layout, Platform
from dspark_cli.config.deploy import K8sConf, SlurmConf
from dspark_cli.config.domain import (
    COMMIT,
    PORT,
    POSITIVE,
    SHA256,
    between,
    nonempty,
    regexes,
    schema_class,
)
from dspark_cli.config.watch import WatchConf


@schema_class
class HwArgs:
    """vLLM options a hardware profile sets: parallelism, executor, MoE backend, dtype."""

    tensor_parallel_size: int | None = field(default=None, metadata=POSITIVE)
    data_parallel_size: int | None = field(default=None, metadata=POSITIVE)
    pipeline_parallel_size: int | None = field(default=None, metadata=POSITIVE)
    distributed_executor_backend: str | None = None
    moe_backend: str | None = None
    dtype: str | None = None


@schema_class
class HardwareConf:
    """One machine (`hw=<profile>`): its platform, GPUs, detection and launch settings."""

    name: str = field(default=MISSING, metadata=nonempty())
    platform: Platform = MISSING
    num_gpus: int = field(default=MISSING, metadata=between(0))
    # Case-insensitive regexes matched against detected device names and GPU architectures.
    detect: list[str] = field(default_factory=list, metadata=regexes())
    env: dict[str, str] = field(default_factory=dict)
    args: HwArgs = field(default_factory=HwArgs)
    # Startup log lines a healthy server on this hardware prints (checked by `dspark smoke`).
    expect_log: list[str] = field(default_factory=list)
    # Shared libraries put in LD_PRELOAD where this machine has them (machine/detect.py);
    # `hw.env.LD_PRELOAD` set explicitly takes over.
    preload: list[str] = field(default_factory=list)
    # More than one node (launch/layout.py): `args` describe one node; in the dp layouts the
    # data parallel size is per node (vLLM's DP size = nodes x it), in tp the sizes are totals.
    nodes: int = field(default=1, metadata=POSITIVE)
    layout: Layout = Layout.dp
    head_address: str | None = None  # null: the deploy target gives it at run time
    # What one node's server can count on: deploy=k8s requests it beside the GPUs (so the pod
    # is no BestEffort workload, evicted first); deploy.k8s.cpu/memory override it. Memory is
    # a Kubernetes quantity (1000Gi); null: not requested.
    node_cpus: int | None = field(default=None, metadata=POSITIVE)
    node_memory: str | None = None
    # --data-parallel-rpc-port and the tp layout's --master-port (vLLM's defaults)
    dp_rpc_port: int = field(default=29550, metadata=PORT)
    master_port: int = field(default=29501, metadata=PORT)


@schema_class
class ModelArgs:
    """vLLM options a model profile sets."""

    served_model_name: str | None = field(default=None, metadata=nonempty())
    max_model_len: int | None = field(default=None, metadata=POSITIVE)
    kv_cache_dtype: str | None = None
    trust_remote_code: bool | None = None
    tokenizer_mode: str | None = None
    reasoning_parser: str | None = None


@schema_class
class ExpectedFacts:
    """Pinned checkpoint facts; a null pin is not checked."""

    config_sha256: str | None = None
    index_sha256: str | None = None
    num_shards: int | None = field(default=None, metadata=POSITIVE)
    total_bytes: int | None = field(default=None, metadata=between(0))
    architecture: str | None = None
    draft_params: int | None = field(default=None, metadata=between(0))
    # The draft proposes its target's own greedy tokens (the tiny Qwen3 pair): on greedy
    # requests a slot it drafted is rejected only when verification left it out, so the
    # spec-decode counters show adaptive verification's trimming (server/metrics.py).
    draft_exact: bool | None = None


@schema_class
class ModelConf:
    """The checkpoint to serve, its family and the facts pinned for it."""

    name: str = field(default=MISSING, metadata=nonempty())
    path: str = field(default=MISSING, metadata=nonempty())
    # "deepseek_v4": sparse MLA and DSpark-in-checkpoint rules apply.
    family: str | None = None
    # "tiny": dspark builds this model locally on first use (no hub access needed);
    # "tiny_qwen3": the tiny Qwen3 target at `path` and its DSpark draft at `draft`.
    synthetic: str | None = None
    # A DSpark draft checkpoint of its own that pairs with this target (a Qwen3DSparkModel
    # for a Qwen3 target): what speculative=dspark_draft serves as its `model`.
    draft: str | None = field(default=None, metadata=nonempty())
    env: dict[str, str] = field(default_factory=dict)
    args: ModelArgs = field(default_factory=ModelArgs)
    expected: ExpectedFacts = field(default_factory=ExpectedFacts)
    expect_log: list[str] = field(default_factory=list)


@schema_class
class SpeculativeConf:
    """The drafter (`--speculative-config`) and how its draft count is checked."""

    name: str = MISSING
    method: str | None = None
    # Draft model path for method=draft_model (vLLM's `model` key).
    model: str | None = field(default=None, metadata=nonempty())
    num_speculative_tokens: int | None = field(default=None, metadata=POSITIVE)
    enable_adaptive_verification: bool | None = None
    # Any other `--speculative-config` key, passed through as JSON.
    extra: dict[str, Any] = field(default_factory=dict)
    draft_tokens_rule: DraftTokensRule = DraftTokensRule.exact
    env: dict[str, str] = field(default_factory=dict)
    expect_log: list[str] = field(default_factory=list)


@schema_class
class CompilationConf:
    """vLLM's compilation and CUDA graph settings (`--compilation-config`)."""

    name: str = MISSING
    mode: int | None = field(default=None, metadata=between(0, 3))  # vLLM's CompilationMode 0-3
    cudagraph_mode: CudagraphMode | None = None
    max_cudagraph_capture_size: int | None = field(default=None, metadata=POSITIVE)
    enforce_eager: bool = False
    env: dict[str, str] = field(default_factory=dict)


@schema_class
class ServingArgs:
    """vLLM serving options a serving profile sets."""

    async_scheduling: bool | None = None
    enable_prefix_caching: bool | None = None
    max_num_seqs: int | None = field(default=None, metadata=POSITIVE)
    max_num_batched_tokens: int | None = field(default=None, metadata=POSITIVE)
    gpu_memory_utilization: float | None = field(default=None,
                                                 metadata=between(0, 1, low_open=True))
    enable_lora: bool | None = None


@schema_class
class ServingConf:
    """Batching, caching and memory settings of the server."""

    name: str = MISSING
    env: dict[str, str] = field(default_factory=dict)
    args: ServingArgs = field(default_factory=ServingArgs)
    # Any other `vllm serve` option, by dest name (`foo_bar: 1` renders `--foo-bar 1`).
    extra_args: dict[str, Any] = field(default_factory=dict)


@schema_class
class ServerConf:
    """Where the server listens, or which running server to attach to."""

    # null: vLLM's default (all interfaces); clients use 127.0.0.1
    host: str | None = field(default=None, metadata=nonempty())
    port: int = field(default=8000, metadata=PORT)
    url: str | None = None  # attach to a running server instead of launching one
    command: list[str] | None = None  # replaces the launched argv (wrapper, test double)
    log: str | None = None  # the log of an attached server, for log checks
    ready_timeout_s: float = field(default=1200.0, metadata=between(0, low_open=True))
    stop_grace_s: float = field(default=15.0, metadata=between(0))
    # vLLM's own validation of the command: a subprocess that imports vLLM (seconds; minutes
    # on a loaded host).
    validate_timeout_s: float = field(default=300.0, metadata=between(0, low_open=True))
    # Attached: how long connections may be refused before nothing listening is the verdict.
    attach_refused_s: float = field(default=2.0, metadata=between(0))
    # How long the generation counter may lag an answer before a short count is a mismatch.
    metrics_settle_s: float = field(default=3.0, metadata=between(0))


@schema_class
class ChecksConf:
    """Explicit, recorded overrides of fail-closed checks."""

    allow_missing_confidence_head: bool = False


@schema_class
class LogsConf:
    """Server log patterns every command judges logs by (name -> regex; null: switched off)."""

    fatal: dict[str, str | None] = field(default_factory=dict)
    # vLLM overrode what was asked (not fatal): smoke reports, bench marks the cell degraded.
    degraded: dict[str, str | None] = field(default_factory=dict)
    # The DSpark draft's load line (named group `params`), held to model.expected.draft_params.
    draft_params: str = r"DSpark draft model loaded: (?P<params>\d+) params"
    # Lines that show an asked-for feature ran (the report's evidence); a profile expects one
    # by naming it in its expected lines (`${logs.evidence.<name>}`).
    evidence: dict[str, str | None] = field(default_factory=dict)
    # Speculative decoding ran other than asked (V1 runner, adaptive refused): reported; with
    # adaptive verification asked for, the smoke fails and the cell is invalid.
    fallbacks: dict[str, str | None] = field(default_factory=dict)
    context_lines: int = field(default=10, metadata=between(0))


@schema_class
class DeployConf:
    """Where the plan runs (`deploy=local|slurm|k8s`); each target's file adds its own keys."""

    target: str = "local"
    slurm: SlurmConf = field(default_factory=SlurmConf)  # deploy=slurm (dspark_cli/deploy)
    k8s: K8sConf = field(default_factory=K8sConf)  # deploy=k8s


@schema_class
class RuntimePins:
    """Pinned software a result is measured with (`dspark_cli/launch/runtime.py`); a null
    pin is not checked. Commits match by prefix (7 hex digits or more)."""

    vllm_version: str | None = None
    # the commit the installed vLLM reports (its build's base: a patch on top is not seen)
    vllm_commit: str | None = field(default=None, metadata=COMMIT)
    torch: str | None = None
    aiter_version: str | None = None
    aiter_commit: str | None = field(default=None, metadata=COMMIT)
    aiter_wheel_sha256: str | None = field(default=None, metadata=SHA256)
    cuda: str | None = None
    rocm: str | None = None


@schema_class
class ImageConf:
    """The container image, which a container cannot see: from config or the environment."""

    tag: str | None = "${oc.env:DSPARK_IMAGE_TAG,null}"
    id: str | None = "${oc.env:DSPARK_IMAGE_ID,null}"
    base_digest: str | None = "${oc.env:DSPARK_BASE_DIGEST,null}"
    # The commit of a patch applied on top of the image's vLLM: no vLLM metadata records it.
    vllm_patch: str | None = field(default="${oc.env:DSPARK_VLLM_PATCH,null}", metadata=COMMIT)
    # Where anyone can pull the image (registry/repo@sha256:...); null: a locally built image.
    published: str | None = "${oc.env:DSPARK_IMAGE_PUBLISHED,null}"


@schema_class
class RuntimeConf:
    """The software a result is measured with: pinned versions and the image.

    A hardware profile pins no software: an image group (`+image=seed_mi350x`) sets
    `runtime.expected`, and `runtime.expected=null` switches every pin off at once.
    `reference` names the image group a run without pins is compared with: the differences are
    noted once, never refused."""

    expected: RuntimePins | None = field(default_factory=RuntimePins)
    reference: str | None = field(default=None, metadata=nonempty())
    image: ImageConf = field(default_factory=ImageConf)


@schema_class
class LaunchConf:
    """What every command that launches (or plans) a vLLM server composes."""

    # null until a hardware profile is composed (`+hw=...`, or detected): verify-checkpoint
    # composes none, so a checkpoint is judged the same on every host.
    hw: HardwareConf | None = None
    model: ModelConf = field(default_factory=ModelConf)
    speculative: SpeculativeConf = field(default_factory=SpeculativeConf)
    compilation: CompilationConf = field(default_factory=CompilationConf)
    serving: ServingConf = field(default_factory=ServingConf)
    server: ServerConf = field(default_factory=ServerConf)
    checks: ChecksConf = field(default_factory=ChecksConf)
    logs: LogsConf = field(default_factory=LogsConf)
    deploy: DeployConf = field(default_factory=DeployConf)
    runtime: RuntimeConf = field(default_factory=RuntimeConf)
    watch: WatchConf = field(default_factory=WatchConf)  # config/watch.py


def store_schema(name: str, node: type) -> None:
    """Put a primary schema in Hydra's ConfigStore unless it is there already: building the node
    from its dataclasses is a tenth of a second, and a process may compose many times."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    if f"{name}.yaml" not in store.repo:
        store.store(name=name, node=node)


def register() -> None:
    """Register the shared schema; command modules register their own primaries."""
    store_schema("launch_schema", LaunchConf)
