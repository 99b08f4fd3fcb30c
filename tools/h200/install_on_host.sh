#!/usr/bin/env bash
# On the H200 host (no network): put vLLM (and the torch it pins) and dspark into /tmp/site with
# no byte fetched, leaving the image's own torch untouched. The pieces of fetch_payload.sh came
# one per device command into STASH (a command moves its piece out of the work tree: `mkdir -p
# /root/stash && mv .gpu/payload/piece.NN /root/stash/`); this reassembles them, checks the
# SHA-256, unpacks the wheels and installs them with `pip install --target`, and dspark's wheels
# the same way into a folder of their own (pip --target --upgrade would replace the shared bin/
# folder, vLLM's script with it).
#   bash tools/h200/install_on_host.sh /root/stash .gpu/payload/SHA256SUMS .gpu/payload/dspark
#   export PYTHONPATH=/tmp/site-dspark:/tmp/site PATH=/tmp/site-dspark/bin:/tmp/site/bin:$PATH
set -euo pipefail
stash=$1 sums=$(realpath "$2") dspark=$3 site=${SITE:-/tmp/site}
t0=$(date +%s.%N)
cat "$stash"/piece.* > "$stash/wheels.tar" && rm -f "$stash"/piece.*
(cd "$stash" && sha256sum -c "$sums")
tar -C "$stash" -xf "$stash/wheels.tar" && rm -f "$stash/wheels.tar"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$site" "$stash"/wheels/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site-dspark" "$dspark"/*.whl
# pip wrote the scripts' shebangs for the Python that ran it: point them at this one.
sed -i "1s|^#!.*python.*|#!$(command -v python3)|" "$site"/bin/* "$site-dspark"/bin/*
echo "install: $(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$(date +%s.%N)") s into $site"
