#!/usr/bin/env bash
# Build the payload that installs a vLLM CUDA wheel (0.28.0 by default: the oldest with adaptive
# verification, with the torch 2.13 it pins) and dspark into the H200 image, which reaches no
# package index: wheels fetched here with pip (every file checked against the hashes in the lock
# files), trimmed of what a Hopper GPU serving a dense model never loads, put in one tar (wheels
# are compressed already: an xz pass over 1.2 GB would take an hour on two cores and save a
# fifth) and split into pieces of at most 59 MiB (one device command carries 64 MiB, the checkout
# included). README.md beside this says how the pieces are installed there.
#   tools/h200/fetch_payload.sh vllm [OUT]     # vLLM and its deps: OUT/piece.NN, OUT/SHA256SUMS
#   VLLM_VERSION=0.26.0 tools/h200/fetch_payload.sh vllm   # the lock vllm-$VLLM_VERSION.lock
#   tools/h200/fetch_payload.sh dspark [OUT]   # dspark's wheel and deps: OUT/dspark/*.whl
# OUT defaults to .gpu/payload (ignore it: `echo /.gpu/ >> .git/info/exclude`). dspark's part is
# small and changes with the checkout, so it is built apart and carried beside the last piece.
# Needs: network, python3 with pip (any version: pip targets 3.12 by flags), zip, split.
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
        --platform manylinux_2_18_x86_64 --platform manylinux_2_24_x86_64
        --platform manylinux_2_26_x86_64
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
  local work=$out/work lock=$here/vllm-${VLLM_VERSION:-0.28.0}.lock
  rm -rf "$work" "$out"/piece.* "$out"/SHA256SUMS && mkdir -p "$work/wheels"
  "$py" -m pip download -q --no-deps --only-binary=:all: "${target[@]}" --require-hashes \
      -d "$work/wheels" -r "$lock"
  # What a Hopper GPU serving a dense model never loads: FlashAttention 2's kernels (vLLM picks
  # FA3 on compute capability 9, fa_utils.get_flash_attn_version; FA2's import is guarded) and
  # DeepGEMM's extension built for the other Pythons. `zip -d` drops them without recompressing
  # the rest (pip does not check a wheel's RECORD hashes at install; the lock's hash is of the
  # file as PyPI serves it, checked above).
  local vllm_whl=("$work"/wheels/vllm-*.whl) drop=(vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so)
  for v in 310 311 313 314; do
    drop+=("vllm/third_party/deep_gemm/_C.cpython-$v-x86_64-linux-gnu.so")
  done
  zip -q -d "${vllm_whl[0]}" "${drop[@]}"
  tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner -cf "$work/wheels.tar" wheels
  split -b 59M -d "$work/wheels.tar" "$out/piece."
  (cd "$work" && sha256sum wheels.tar > "$out/SHA256SUMS")
  du -sh "$work/wheels" "$work/wheels.tar"
  rm -rf "$work"
  ls -l "$out"/piece.*
}

case $part in
  vllm) vllm_part ;;
  dspark) dspark_part ;;
  *) echo "usage: fetch_payload.sh vllm|dspark [OUT]" >&2; exit 2 ;;
esac
echo "payload built in $(( $(date +%s) - start )) s: $out"
