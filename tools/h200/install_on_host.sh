#!/usr/bin/env bash
# On the H200 host (no network): put vLLM 0.26.0 and dspark into /tmp/site with no byte fetched.
# The pieces of fetch_payload.sh came one per device command into STASH (a command moves its
# piece out of the work tree: `mkdir -p /root/stash && mv .gpu/payload/piece.NN /root/stash/`);
# this reassembles them, checks the SHA-256, unpacks the tree that `pip install --target` wrote
# there, and installs dspark's wheels with pip the same way, into a folder of their own (pip
# --target --upgrade would replace the shared bin/ folder, vLLM's script with it).
#   bash tools/h200/install_on_host.sh /root/stash .gpu/payload/SHA256SUMS .gpu/payload/dspark
#   export PYTHONPATH=/tmp/site-dspark:/tmp/site PATH=/tmp/site-dspark/bin:/tmp/site/bin:$PATH
set -euo pipefail
stash=$1 sums=$(realpath "$2") dspark=$3 site=${SITE:-/tmp/site}
t0=$(date +%s.%N)
cat "$stash"/piece.* > "$stash/site.tar.xz"
(cd "$stash" && sha256sum -c "$sums")
mkdir -p "$site"
# Python's tarfile, not the xz tool: the image's python3 is the one thing sure to be there.
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], filter="tar")' \
    "$stash/site.tar.xz" "$site"
rm -f "$stash/site.tar.xz"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site-dspark" "$dspark"/*.whl
# pip wrote the scripts' shebangs for the Python that ran it: point them at this one.
sed -i "1s|^#!.*python.*|#!$(command -v python3)|" "$site"/bin/* "$site-dspark"/bin/*
echo "install: $(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$(date +%s.%N)") s into $site"
