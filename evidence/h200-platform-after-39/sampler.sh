set -u
PY=/opt/torch/.venv/bin/python
$PY -m pip install -q --no-deps --no-index --target /tmp/site-dspark .gpu/payload/dspark/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site-dspark
rm -f /tmp/started
$PY - > $OUT/matmul.log 2>&1 <<'PYEOF' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
a @ a; torch.cuda.synchronize()
open("/tmp/started", "w").write(str(time.time()))
end = time.time() + 9
n = 0
while time.time() < end:
    a @ a; n += 1
torch.cuda.synchronize(); print(f"{n} matmuls of 8192x8192 bf16 in 9 s")
PYEOF
while [ ! -e /tmp/started ]; do sleep 0.1; done
sleep 1
$PY -m dspark_cli.machine.gpu_sampler --interval 0.2 --duration 5 --out $OUT/gpu_sampler-matmul.json > /dev/null 2>&1
wait
cat $OUT/matmul.log
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
