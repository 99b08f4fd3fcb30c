"""Composed config -> launch plan: a plain value (env, every node's argv, the profile facts
checks need).

Pure and fast: no I/O, no imports of torch or vLLM. `serve`, `smoke` and `bench` all launch
through this one function, so what was smoke-tested is what is served and benchmarked.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from dspark_cli.config.choices import Platform
from dspark_cli.errors import UsageError
from dspark_cli.launch import vllm_options
from dspark_cli.launch.layout import (
    VLLM_DEFAULT_PORT,
    NodeLaunch,
    NodeLayout,
    node_layout,
    render_flag,
)
from dspark_cli.launch.secrets import SECRET_OPTIONS, is_secret_name
from dspark_cli.machine.detect import installed_libraries

if TYPE_CHECKING:
    from dspark_cli.config.schema import (
        CompilationConf,
        HwArgs,
        LaunchConf,
        ModelArgs,
        ServingArgs,
        SpeculativeConf,
    )


LibraryFinder = Callable[[Sequence[str]], tuple[str, ...]]

CLIENT_DEFAULT_HOST = "127.0.0.1"

# Flag order of the validation report's command line; flags not listed follow in config order.
FLAG_ORDER = (
    "served_model_name", "tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
    "async_scheduling", "enable_prefix_caching", "max_model_len", "max_num_seqs",
    "max_num_batched_tokens", "distributed_executor_backend", "gpu_memory_utilization",
    "kv_cache_dtype", "dtype", "trust_remote_code", "moe_backend", "tokenizer_mode",
    "reasoning_parser", "enable_lora", "enforce_eager", "compilation_config",
    "speculative_config", "host", "port",
)
ENV_GROUPS = ("hw", "model", "compilation", "speculative", "serving")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Profile:
    """The profile facts a rule needs that are not part of the command vLLM runs: which hardware
    profile (its platform, GPUs per node, GPU name patterns), how many nodes and their ports,
    and the model family. Taken from the config once, when the plan is built, so rules judge the
    plan and the machine, never the config."""

    hw_name: str
    platform: Platform
    num_gpus: int  # per node
    nodes: int
    detect: tuple[str, ...]  # GPU name/arch patterns of the hw profile
    family: str | None  # the model family (model.family)
    dp_rpc_port: int  # hw.dp_rpc_port (the dp layouts)
    master_port: int  # hw.master_port (the tp layout)


def profile_of(cfg: LaunchConf) -> Profile:
    hw = cfg.hw
    assert hw is not None  # composed by every command that launches (null: verify-checkpoint's)
    return Profile(str(hw.name), Platform(hw.platform), int(hw.num_gpus), int(hw.nodes),
                   tuple(str(p) for p in hw.detect), cfg.model.family,
                   int(hw.dp_rpc_port), int(hw.master_port))


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a launch is: the one command the config renders (`command`, node rank 0 of
    one node), every node's command (`layout`: one node is a one-element tuple holding that
    command, byte for byte), the environment, where it listens, and the profile facts rules
    need (`profile`)."""

    env: tuple[tuple[str, str], ...]
    command: NodeLaunch
    layout: NodeLayout
    model_path: str
    served_model_name: str
    host: str | None
    port: int
    base_url: str
    profile: Profile

    @property
    def argv(self) -> tuple[str, ...]:
        return self.command.argv

    @property
    def args(self) -> tuple[tuple[str, Any], ...]:
        """vLLM options by argparse dest, as rendered (checks read these, never the argv)."""
        return self.command.args

    def arg(self, dest: str, default: Any = None) -> Any:
        return self.command.arg(dest, default)

    @property
    def env_map(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def client_host(self) -> str:
        return client_host(self.host)


def client_host(host: str | None) -> str:
    """Where a local client reaches a server listening on `host` (any address: loopback)."""
    return CLIENT_DEFAULT_HOST if host in (None, "", "0.0.0.0", "::") else host


def _non_null(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if v is not None}


def speculative_config(spec: SpeculativeConf) -> dict[str, Any] | None:
    """The `--speculative-config` JSON object, or None for no speculative decoding."""
    if spec.method is None:
        return None
    fields = {
        "method": spec.method,
        "model": spec.model,
        "num_speculative_tokens": spec.num_speculative_tokens,
        "enable_adaptive_verification": spec.enable_adaptive_verification,
    }
    for key in spec.extra:
        field = vllm_options.speculative_owner(key)
        if field:
            raise UsageError(f"`speculative.extra.{key}` sets the speculative config's "
                             f"{field.split('.')[-1]!r}, which `{field}` owns; set `{field}` "
                             "(or pick speculative=<profile>) instead.")
    return {**_non_null(fields), **spec.extra}


def compilation_config(comp: CompilationConf) -> dict[str, Any] | None:
    """The `--compilation-config` JSON object, or None when the profile sets nothing."""
    fields = {
        "mode": comp.mode,
        "cudagraph_mode": comp.cudagraph_mode.value if comp.cudagraph_mode else None,
        "max_cudagraph_capture_size": comp.max_cudagraph_capture_size,
    }
    return _non_null(fields) or None


def _options(args: HwArgs | ModelArgs | ServingArgs) -> Iterator[tuple[str, Any]]:
    """A group's `args` as (dest, value): each field names the vLLM option by its dest."""
    return ((f.name, getattr(args, f.name)) for f in dataclasses.fields(args))


def _collect_args(cfg: LaunchConf) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """vLLM's options by dest, in the seed's order, and the secrets among the free-form options
    as (variable, value, key): vLLM reads those from its environment, never from the argv."""
    owners: dict[str, str] = {}
    args: dict[str, Any] = {}
    secret_env: list[tuple[str, str, str]] = []

    def put(dest: str, value: Any, key: str) -> None:
        if value is None:
            return
        vllm_options.check_value(key, value)  # no value may smuggle in another option
        if dest in owners:
            raise UsageError(
                f"`{key}` sets the vLLM option --{dest.replace('_', '-')} that `{owners[dest]}` "
                "already sets; set it in one place."
            )
        owners[dest], args[dest] = key, value

    for group in ("hw", "model", "serving"):
        for dest, value in _options(getattr(cfg, group).args):
            put(dest, value, f"{group}.args.{dest}")
    put("enforce_eager", True if cfg.compilation.enforce_eager else None,
        "compilation.enforce_eager")
    put("compilation_config", compilation_config(cfg.compilation), "compilation")
    put("speculative_config", speculative_config(cfg.speculative), "speculative")
    host, port = cfg.server.host, int(cfg.server.port)
    put("host", host, "server.host")
    put("port", port if port != VLLM_DEFAULT_PORT else None, "server.port")
    for key, value in cfg.serving.extra_args.items():
        where = f"serving.extra_args.{key}"
        dest, value = _free_form_arg(where, key, value)
        if dest in SECRET_OPTIONS and value is not True and value is not None:
            secret_env.append((SECRET_OPTIONS[dest], _one_secret(where, dest, value), where))
            continue
        put(dest, value, where)
    # a flag of a config group's field the vLLM planned for lacks (an older or newer one)
    vllm_options.refuse_missing({owners[d]: render_flag(d, v)[0] for d, v in args.items()})
    order = {d: i for i, d in enumerate(FLAG_ORDER)}
    return dict(sorted(args.items(), key=lambda kv: order.get(kv[0], len(order)))), secret_env


def _one_secret(where: str, dest: str, value: Any) -> str:
    """The one value of a secret option (vLLM's environment variable holds one)."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    if len(items) != 1 or isinstance(items[0], bool | dict | list):
        raise UsageError(f"`{where}` must be one value: dspark passes it to vLLM as "
                         f"{SECRET_OPTIONS[dest]} in its environment, which holds one.")
    return str(items[0])


def _free_form_arg(where: str, key: str, value: Any) -> tuple[str, Any]:
    """(dest, value) of a free-form vLLM option, refusing what a config group owns, a value
    vLLM would read as another option, and a name that is no option name."""
    option = vllm_options.resolve(key)
    if option is None:
        raise vllm_options.no_such_option(where, key)
    dest = option.dest
    owner = vllm_options.owner(dest)
    if owner:
        raise UsageError(f"`{where}` sets vLLM's {option.flag}, which dspark sets from "
                         f"`{owner}`; set it there, so the checks judge what vLLM runs.")
    vllm_options.check_value(where, value, option)
    return dest, (not value if option.negated else value)  # a `--no-x` key takes a bool


def _with_preload(env: tuple[tuple[str, str], ...], names: list[str],
                  libraries: LibraryFinder) -> tuple[tuple[str, str], ...]:
    """LD_PRELOAD of the named libraries that were found, unless the config sets it."""
    found = libraries(names) if names and "LD_PRELOAD" not in dict(env) else ()
    return (*env, ("LD_PRELOAD", ":".join(found))) if found else env


def _collect_env(cfg: LaunchConf, secret_env: list[tuple[str, str, str]]
                 ) -> tuple[tuple[str, str], ...]:
    env: dict[str, str] = {}
    owners: dict[str, str] = {}
    entries = [(name, str(value), f"{group}.env.{name}")
               for group in ENV_GROUPS for name, value in getattr(cfg, group).env.items()]
    for name, value, key in entries + secret_env:
        if not _ENV_NAME.match(str(name)):
            raise UsageError(f"`{key}`: the name is not a valid environment variable name.")
        if name in env and env[name] != value:
            shown = (lambda k, v: f"`{k}`") if is_secret_name(name) else (
                lambda k, v: f"`{k}={v}`")
            raise UsageError(f"{shown(key, value)} conflicts with "
                             f"{shown(owners[name], env[name])}; set the variable in one place.")
        env[name], owners[name] = value, key
    return tuple(env.items())


def build_plan(cfg: LaunchConf, libraries: LibraryFinder = installed_libraries) -> LaunchPlan:
    """The launch plan of a composed LaunchConf; raises UsageError on a contradictory config.
    `libraries` finds `hw.preload`'s libraries (pure: pass a fixed answer in tests)."""
    args, secret_env = _collect_args(cfg)
    path = str(cfg.model.path)
    vllm_options.check_value("model.path", path)
    served = args.get("served_model_name") or path
    argv = ["vllm", "serve", path]
    for dest, value in args.items():
        argv += render_flag(dest, value)
    host, port = cfg.server.host, int(cfg.server.port)
    base_url = cfg.server.url or f"http://{client_host(host)}:{port}"
    assert cfg.hw is not None  # composed by every command that launches (null: verify-checkpoint's)
    env = _with_preload(_collect_env(cfg, secret_env), list(cfg.hw.preload),
                        libraries)
    command = NodeLaunch(0, True, tuple(argv), MappingProxyType(dict(env)), port,
                         tuple(args.items()))
    return LaunchPlan(
        env=env,
        command=command,
        layout=node_layout(cfg.hw, command, path),
        model_path=path,
        served_model_name=str(served),
        host=host,
        port=port,
        base_url=str(base_url).rstrip("/"),
        profile=profile_of(cfg),
    )
