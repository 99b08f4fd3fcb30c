#!/usr/bin/env bash
# Written by dspark: the exact environment and command.
set -euo pipefail
export HF_HUB_OFFLINE=1
export VLLM_USE_V2_MODEL_RUNNER=1
vllm serve /root/models/tiny-qwen3 \
  --served-model-name tiny \
  --tensor-parallel-size 1 \
  --data-parallel-size 1 \
  --async-scheduling \
  --enable-prefix-caching \
  --max-model-len 512 \
  --max-num-seqs 64 \
  --max-num-batched-tokens 16384 \
  --distributed-executor-backend mp \
  --gpu-memory-utilization 0.3 \
  --moe-backend marlin \
  --compilation-config '{"mode":3,"cudagraph_mode":"FULL_AND_PIECEWISE","max_cudagraph_capture_size":128}' \
  --speculative-config '{"method":"dspark","model":"/root/models/tiny-qwen3-dspark","num_speculative_tokens":4}'
