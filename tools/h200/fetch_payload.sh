#!/usr/bin/env bash
# Build the payload that installs vLLM 0.26.0 (CUDA) and dspark into the H200 image, which
# reaches no package index: wheels fetched here with pip (every file checked against the hashes
# in the two lock files), installed here with `pip install --target` for Python 3.12 on
# manylinux x86_64, trimmed, packed as one xz tar and split into pieces of at most 60 MiB (one
# device command carries 64 MiB). README.md beside this says how the pieces are installed there.
#   tools/h200/fetch_payload.sh vllm [OUT]     # vLLM and its deps: OUT/piece.NN, OUT/SHA256SUMS
#   tools/h200/fetch_payload.sh dspark [OUT]   # dspark's wheel and deps: OUT/dspark/*.whl
# OUT defaults to .gpu/payload (ignore it: `echo /.gpu/ >> .git/info/exclude`). dspark's part is
# small and changes with the checkout, so it is built apart and carried beside the last piece.
# Needs: network, python3 with pip (any version: pip targets 3.12 by flags), xz, split.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
part=${1:?usage: fetch_payload.sh vllm|dspark [OUT]}
out=$(mkdir -p "${2:-$repo/.gpu/payload}" && cd "${2:-$repo/.gpu/payload}" && pwd)
py=${PYTHON:-python3}
start=$(date +%s)

# pip matches each manylinux_2_N tag exactly: name the ones the locked wheels use.
target=(--python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
        --platform manylinux_2_24_x86_64 --platform manylinux_2_26_x86_64
        --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64
        --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64
        --platform manylinux_2_35_x86_64 --platform linux_x86_64 --platform any)

dspark_part() {
  local work=$out/dspark
  rm -rf "$work" && mkdir -p "$work/sdist"
  # antlr4-python3-runtime 4.9.3 (Hydra pins 4.9.*) exists only as an sdist: fetch it by hash
  # and build its pure-Python wheel here.
  sed '/^antlr4/,+1d' "$here/dspark-deps.lock" > "$work/sdist/wheels.lock"
  "$py" -m pip download -q --no-deps --only-binary=:all: "${target[@]}" --require-hashes \
      -d "$work" -r "$work/sdist/wheels.lock"
  sed -n '/^antlr4/,+1p' "$here/dspark-deps.lock" > "$work/sdist/sdist.lock"
  "$py" -m pip download -q --no-deps --no-binary=:all: --require-hashes \
      -d "$work/sdist" -r "$work/sdist/sdist.lock"
  "$py" -m pip wheel -q --no-deps -w "$work" "$work"/sdist/antlr4-python3-runtime-*.tar.gz
  # dspark itself, from this checkout.
  "$py" -m pip wheel -q --no-deps -w "$work" "$repo"
  rm -rf "$work/sdist"
  ls -l "$work"
}

vllm_part() {
  local work=$out/work
  rm -rf "$work" "$out"/piece.* "$out"/SHA256SUMS && mkdir -p "$work/wheels"
  "$py" -m pip download -q --no-deps --only-binary=:all: "${target[@]}" --require-hashes \
      -d "$work/wheels" -r "$here/vllm-0.26.0.lock"
  "$py" -m pip install -q --no-index --no-deps --no-compile --only-binary=:all: "${target[@]}" \
      --target "$work/site" "$work"/wheels/*.whl
  # What a Hopper GPU serving a dense model never loads: FlashAttention 2's kernels (vLLM picks
  # FA3 on compute capability 9, fa_utils.get_flash_attn_version; FA2's import is guarded) and
  # DeepGEMM's extension built for the other Pythons. The scripts' shebangs name this machine's
  # Python: the install step there rewrites them.
  rm -f "$work/site/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so" \
        "$work"/site/vllm/third_party/deep_gemm/_C.cpython-3{10,11,13,14}-x86_64-linux-gnu.so

  tar -C "$work/site" --sort=name --owner=0 --group=0 --numeric-owner -cf - . \
      | xz -6 -T"${XZ_THREADS:-2}" > "$work/site.tar.xz"
  split -b 60M -d "$work/site.tar.xz" "$out/piece."
  (cd "$work" && sha256sum site.tar.xz > "$out/SHA256SUMS")
  du -sh "$work/site" "$work/site.tar.xz"
  ls -l "$out"/piece.*
}

case $part in
  vllm) vllm_part ;;
  dspark) dspark_part ;;
  *) echo "usage: fetch_payload.sh vllm|dspark [OUT]" >&2; exit 2 ;;
esac
echo "payload built in $(( $(date +%s) - start )) s: $out"
