export VLLM_CPU_KVCACHE_SPACE=1
export HF_HUB_OFFLINE=1
export LD_PRELOAD=/golden-libs/libtcmalloc_minimal.so.4:/golden-libs/libiomp5.so
vllm serve /golden-cache/models/tiny-llama-v1 \
  --served-model-name tiny \
  --tensor-parallel-size 1 \
  --max-model-len 512 \
  --max-num-seqs 16 \
  --dtype float32 \
  --enforce-eager
