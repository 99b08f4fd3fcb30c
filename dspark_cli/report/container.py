"""What the Container Provenance section says beyond its table: the vLLM base and the patch
as two facts (each with where it comes from), and what a byte-identical reproduction of the
image needs. Pure: the run's config (`runtime.image`, `runtime.expected`) and provenance
(`runtime`, the installed software's own metadata) in, sentences out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


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
