#!/usr/bin/env bash
# On the H200 host, after install_on_host.sh: the validation report's three arms (no
# speculation, DSpark with a fixed K, DSpark with adaptive verification) through dspark's own
# commands, against vLLM 0.28 and the tiny Qwen3 DSpark pair (the draft with its confidence head,
# and a copy without it). One pass, in order, each step logged with its time and exit status to
# $EV/steps.log; a step that fails does not stop the next. It runs longer than one device command
# may (600 s): start it detached and poll,
#   setsid nohup bash tools/h200/run_adaptive.sh > /root/adaptive.log 2>&1 &
#   bash tools/h200/run_adaptive.sh wait 540   # in each later command: waits, then packs $OUT
# Steps: versions; verify-checkpoint (target, draft, head-less draft); the dry runs (the option
# table's source, the head-less refusal); the adaptive smoke on cold caches; the same launch by
# hand on warm caches (boot ratio); the head-less live failure (checkpoint rule overridden on
# purpose); the bench (3 arms x 3 concurrencies, a cold boot per cell; BENCH=0 skips it); the report.
set -uo pipefail
export PYTHONPATH=/tmp/site-dspark:/tmp/site PATH=/tmp/site-dspark/bin:/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
M=${MODELS:-/root/models}
EV=${EV:-/root/ev}
OUT=${OUT:-/tmp/out}
mkdir -p "$EV" "$OUT"

pack() {  # the records, no weights, as one file under $OUT
  tar -C "$EV" --exclude='*.safetensors' -czf "$OUT/ev.tar.gz" . 2>/dev/null
  cp "$EV/steps.log" "$OUT/" 2>/dev/null; ls -la "$OUT"
}
if [ "${1:-}" = wait ]; then  # poll: until the pass ends or $2 seconds pass
  end=$(( $(date +%s) + ${2:-540} ))
  while [ "$(date +%s)" -lt "$end" ] && ! grep -q '^== .* done$' "$EV/steps.log" 2>/dev/null; do
    sleep 5
  done
  tail -n 25 "$EV/steps.log"; pack; exit 0
fi
if [ "${1:-}" = finish ]; then  # out of device time: stop the bench, report what it finished
  pkill -INT -f 'dspark bench' ; sleep 20; pkill -KILL -f 'vllm|dspark' ; sleep 2
  export PYTHONPATH=/tmp/site-dspark:/tmp/site PATH=/tmp/site-dspark/bin:/tmp/site/bin:$PATH
  cd /root && timeout 60 dspark report "$EV/smoke-cold" "$EV/bench" --out "$EV/report" \
    > "$EV/report.out" 2> "$EV/report.err"
  echo "report rc=$?" >> "$EV/steps.log"; tail -n 25 "$EV/steps.log"; pack; exit 0
fi

# Not in the checkout the device command starts in: its own dspark_cli/ would come first on the
# path of every `python -m dspark_cli...` helper dspark starts, in place of the installed one.
cd /root
O=(+hw=h200 hw.num_gpus=1 model=tiny_qwen3 "model.path=$M/tiny-qwen3"
   "model.draft=$M/tiny-qwen3-dspark" serving.args.gpu_memory_utilization=0.3
   serving.args.max_num_seqs=16 compilation.max_cudagraph_capture_size=80)
# The device tool may lend an H100 for an H200: the h200 profile then matches it by name, said.
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)" in
  *H100*) O+=("hw.detect=[H100]"); H100=1 ;;
esac
NOHEAD="model.draft=$M/tiny-qwen3-dspark-nohead"
ADAPT=speculative=dspark_draft_adaptive
log() { echo "== $(date -u +%T) $*" | tee -a "$EV/steps.log"; }
step() {  # step NAME TIMEOUT CMD...: run, log the exit status and the seconds it took
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  log "$name: start"
  timeout "$limit" "$@" > "$EV/$name.out" 2> "$EV/$name.err"
  local rc=$?
  log "$name: rc=$rc in $(( $(date +%s) - t0 )) s"
  return $rc
}
sample() {  # nvidia-smi every 200 ms into $1 until killed
  nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,power.draw,clocks.sm,temperature.gpu \
    --format=csv,noheader,nounits -lms 200 > "$1" 2>&1 &
  echo $!
}

: > "$EV/steps.log"
log "versions"
{ python3 --version
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), torch.ones(2, device="cuda").sum().item())'
  python3 -c 'import importlib.metadata as m; print(*(f"{p} {m.version(p)}" for p in ("vllm", "triton", "flashinfer-python", "nvidia-nccl-cu13", "transformers")))'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  dspark --version; } > "$EV/versions.txt" 2>&1
cat "$EV/versions.txt" >> "$EV/steps.log"
[ "${H100:-0}" = 1 ] && log "an H100, not an H200: +hw=h200 with hw.detect=[H100]"
if ! grep -q '^torch 2.13' "$EV/versions.txt"; then log "torch 2.13 did not load: stop"; log done; exit 1; fi

step verify-target 120 dspark verify-checkpoint model=local "model.path=$M/tiny-qwen3" --json
step verify-draft 120 dspark verify-checkpoint model=qwen3_dspark_draft "model.path=$M/tiny-qwen3-dspark" --json
step verify-draft-nohead 120 dspark verify-checkpoint model=qwen3_dspark_draft "model.path=$M/tiny-qwen3-dspark-nohead" --json
step dry-run 120 dspark serve "${O[@]}" "$ADAPT" --dry-run --json
step refused-nohead 120 dspark serve "${O[@]}" "$ADAPT" "$NOHEAD" --dry-run

# The head-less live failure first: it ends at the draft's load, before any compile.
[ "${NOHEAD_LIVE:-1}" = 1 ] && step smoke-nohead-live 360 dspark smoke "${O[@]}" "$ADAPT" "$NOHEAD" \
  checks.allow_missing_confidence_head=true "hydra.run.dir=$EV/smoke-nohead-live"

pid=$(sample "$EV/nvidia-smi-smoke-cold.csv")
step smoke-cold 480 dspark smoke "${O[@]}" "$ADAPT" +hw.env.VLLM_LOGGING_LEVEL=DEBUG \
  "hydra.run.dir=$EV/smoke-cold"
kill "$pid"

if [ "${BENCH:-1}" = 0 ]; then log "bench: not run (BENCH=0: too little device time)"; log done; exit 0; fi
pid=$(sample "$EV/nvidia-smi-bench.csv")
step bench 1500 dspark bench bench=h200_tiny_adaptive "${O[@]}" ${BENCH_ARGS:-} "hydra.run.dir=$EV/bench"
kill "$pid"
step report 120 dspark report "$EV/smoke-cold" "$EV/bench" --out "$EV/report"
if [ "${RATIO:-0}" = 1 ]; then
  log "hand-boot: the cold smoke's own launch.sh, warm caches"
  t0=$(date +%s.%N)
  setsid bash "$EV/smoke-cold/launch.sh" > "$EV/hand-serve.log" 2>&1 &
  hand=$!
  python3 -c '
import json, sys, time, urllib.request
t0 = float(sys.argv[1])
while time.time() - t0 < 400:
    try:
        if urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=1).status == 200:
            print(json.dumps({"boot_to_health_s": round(time.time() - t0, 2)})); break
    except Exception:
        pass
    time.sleep(0.25)
' "$t0" > "$EV/hand-boot.json"
  log "hand-boot: $(cat "$EV/hand-boot.json")"
  kill -TERM -- "-$hand"; sleep 8; kill -KILL -- "-$hand" 2>/dev/null
fi
log done
