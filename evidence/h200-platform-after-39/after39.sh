#!/usr/bin/env bash
# dspark after issue 39's reshaping, installed into the H200 platform image (no vLLM there).
set -u
PY=$(command -v python3); [ -x /opt/torch/.venv/bin/python ] && PY=/opt/torch/.venv/bin/python
T0=$(date +%s.%N)
$PY -m pip install -q --no-deps --no-index --target /tmp/site-dspark .gpu/payload/dspark/*.whl > $OUT/install.txt 2>&1
echo "install rc=$? in $(echo "$(date +%s.%N) - $T0" | bc) s" >> $OUT/install.txt
export PYTHONPATH=/tmp/site-dspark PATH=/tmp/site-dspark/bin:$PATH
cd /tmp
$PY -m pip check > $OUT/pip-check.txt 2>&1; echo "rc=$?" >> $OUT/pip-check.txt
dspark --version > $OUT/version.txt 2>&1
dspark env > $OUT/env.txt 2>&1; echo "rc=$?" >> $OUT/env.txt
dspark env --json > $OUT/env.json 2> $OUT/env-json.err
dspark serve +hw=h200 --dry-run > $OUT/serve-dry-run.txt 2> $OUT/serve-dry-run.err; echo "rc=$?" >> $OUT/serve-dry-run.err
dspark bench +hw=h200 --dry-run > $OUT/bench-dry-run.txt 2> $OUT/bench-dry-run.err; echo "rc=$?" >> $OUT/bench-dry-run.err
$PY - > $OUT/matmul.txt 2>&1 <<'PYEOF' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 9
n = 0
while time.time() < end:
    a @ a; n += 1
torch.cuda.synchronize(); print(f"{n} matmuls of 8192^2 bf16 in 9 s")
PYEOF
sleep 2
$PY -m dspark_cli.machine.gpu_sampler --interval 0.2 --duration 5 --out $OUT/gpu_sampler-matmul.json > $OUT/gpu_sampler.txt 2>&1
wait
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $OUT/nvidia-smi.csv 2>&1
