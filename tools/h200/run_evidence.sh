#!/usr/bin/env bash
# On the H200 host, after install_on_host.sh: dspark's own commands against vLLM 0.26.0 with the
# tiny Qwen3 DSpark pair (made here by `python -m dspark_cli.vllm.tiny_model qwen3-dspark` and
# carried). One step per device command (each must end within 600 s); records go to $EV and a
# tar of them to $OUT.
#   bash tools/h200/run_evidence.sh setup   # versions, verify-checkpoint x2, the refusal, smoke
#   bash tools/h200/run_evidence.sh ratio   # boot-to-health: `vllm serve` by hand vs dspark smoke
#   bash tools/h200/run_evidence.sh bench   # dspark bench bench=h200_tiny, the GPU sampled
set -uo pipefail
step=$1
export PYTHONPATH=/tmp/site-dspark:/tmp/site PATH=/tmp/site-dspark/bin:/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
M=${MODELS:-/root/models}
EV=${EV:-/root/ev}
OUT=${OUT:-/tmp/out}
mkdir -p "$EV" "$OUT"
# Not in the checkout the device command starts in: its own dspark_cli/ would come first on the
# path of every `python -m dspark_cli...` helper dspark starts, in place of the installed one.
cd /root
O=(+hw=h200 hw.num_gpus=1 model=tiny_qwen3 "model.path=$M/tiny-qwen3"
   "model.draft=$M/tiny-qwen3-dspark" serving.args.gpu_memory_utilization=0.3
   serving.args.max_num_seqs=64 compilation.max_cudagraph_capture_size=128)
say() { echo "== $(date -u +%T) $*"; }
sample() {  # nvidia-smi every 200 ms into $1 until killed
  nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,power.draw,clocks.sm,temperature.gpu \
    --format=csv,noheader,nounits -lms 200 > "$1" 2>&1 &
  echo $!
}
pack() { tar -C "$EV" --exclude='*.safetensors' -czf "$OUT/$1.tar.gz" . ; ls -la "$OUT"; }

case $step in
setup)
  say versions
  { python3 --version; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'
    python3 -c 'import importlib.metadata as m; print("vllm", m.version("vllm"), "flashinfer", m.version("flashinfer-python"), "transformers", m.version("transformers"))'
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    dspark --version 2>&1 || true; } 2>&1 | tee "$EV/versions.txt"
  say verify-checkpoint
  dspark verify-checkpoint model=local "model.path=$M/tiny-qwen3" --json > "$EV/verify-target.json"; echo "target rc=$?"
  dspark verify-checkpoint model=qwen3_dspark_draft "model.path=$M/tiny-qwen3-dspark" --json > "$EV/verify-draft.json"; echo "draft rc=$?"
  say "adaptive verification asked of vLLM 0.26 (a refusal is expected)"
  dspark serve "${O[@]}" speculative=dspark_adaptive --dry-run > "$EV/adaptive-refused.txt" 2>&1; echo "adaptive dry-run rc=$?" | tee -a "$EV/adaptive-refused.txt"
  grep -i "adaptive" "$EV/adaptive-refused.txt" | tail -5
  say "dspark serve --dry-run --json (the option table's source)"
  dspark serve "${O[@]}" speculative=dspark_draft --dry-run --json > "$EV/dry-run.json" 2> "$EV/dry-run.err"; echo "dry-run rc=$?"
  say "smoke, cold caches (the warm-up boot)"
  pid=$(sample "$EV/nvidia-smi-smoke-cold.csv")
  timeout 420 dspark smoke "${O[@]}" speculative=dspark_draft "hydra.run.dir=$EV/smoke-cold"; echo "smoke rc=$?"
  kill "$pid"
  pack setup ;;
ratio)
  say "vllm serve by hand, warm caches: the smoke's own launch.sh"
  rec=$EV/smoke-cold
  port=8000
  t0=$(date +%s.%N)
  setsid bash "$rec/launch.sh" > "$EV/hand-serve.log" 2>&1 &
  hand=$!
  python3 - "$t0" "$port" > "$EV/hand-boot.json" <<'PY'
import json, sys, time, urllib.request
t0, port = float(sys.argv[1]), sys.argv[2]
while time.time() - t0 < 400:
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).status == 200:
            print(json.dumps({"boot_to_health_s": round(time.time() - t0, 2)})); break
    except Exception:
        pass
    time.sleep(0.25)
PY
  cat "$EV/hand-boot.json"
  kill -TERM -- "-$hand"; sleep 8; kill -KILL -- "-$hand" 2>/dev/null; sleep 2
  say "dspark smoke, warm caches"
  timeout 300 dspark smoke "${O[@]}" speculative=dspark_draft "hydra.run.dir=$EV/smoke-warm"; echo "smoke rc=$?"
  pack ratio ;;
bench)
  say "dspark bench bench=h200_tiny"
  pid=$(sample "$EV/nvidia-smi-bench.csv")
  # dspark's own sampler (issue 38), where this checkout or GPU_SAMPLER has it: 120 s of the run.
  if python3 -c 'import dspark_cli.machine.gpu_sampler' 2>/dev/null; then
    python3 -m dspark_cli.machine.gpu_sampler --interval 0.2 --duration 120 \
      --out "$EV/gpu_sampler-bench.json" > "$EV/gpu_sampler-bench.txt" 2>&1 &
  elif [ -f "${GPU_SAMPLER:-}" ]; then
    python3 "$GPU_SAMPLER" --interval 0.2 --duration 120 \
      --out "$EV/gpu_sampler-bench.json" > "$EV/gpu_sampler-bench.txt" 2>&1 &
  fi
  timeout 560 dspark bench bench=h200_tiny "${O[@]}" "hydra.run.dir=$EV/bench"; echo "bench rc=$?"
  kill "$pid"
  dspark report "$EV/smoke-cold" "$EV/bench" --out "$EV/report" > /dev/null; echo "report rc=$?"
  pack bench ;;
*) echo "usage: run_evidence.sh setup|ratio|bench" >&2; exit 2 ;;
esac
