"""A stand-in `nvidia-smi` for a machine without a GPU: a real process that answers dspark's
detection query (tests/fake_gpu.py HOSTS) and its sampling query, looping with `-lms N` as the
real one does (one CSV line per GPU per loop, flushed) until it is terminated.

    python tests/doubles/fake_nvidia_smi.py --host h200x8 [--util 0=95,1=3] [--throttle 1=0x40]
        [--no-throttle-field] -- <nvidia-smi's own arguments>

--util: per-GPU utilisation (default 90 %); --throttle: per-GPU active throttle reasons;
--no-throttle-field: answer the query that asks for clocks_throttle_reasons.active the way a
driver without that field does (an error, exit 2). --detect-as HOST: answer the detection query
as HOST does (no-gpu: a CPU machine to dspark's detection, whose GPUs are still sampled).
"""

from __future__ import annotations

import argparse
import sys
import time

if __package__:
    from tests.fake_gpu import HOSTS
else:  # run as a script: the repository root is two levels up
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.fake_gpu import HOSTS


def pairs(text: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in text.split(",") if p)


def main() -> int:
    own, _, smi = " ".join(sys.argv[1:]).partition(" -- ")
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="h200x8")
    p.add_argument("--util", default="")
    p.add_argument("--throttle", default="")
    p.add_argument("--no-throttle-field", action="store_true")
    p.add_argument("--detect-as")
    opts = p.parse_args(own.split())
    args = smi.split()
    query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), "")
    output = HOSTS[opts.host]
    if query.startswith("index,name") and opts.detect_as:
        output = HOSTS[opts.detect_as]
    if output is None:
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        return 9
    gpus = [line.split(",")[0].strip() for line in (HOSTS[opts.host] or "").splitlines()]
    if query.startswith("index,name"):
        sys.stdout.write(output)
        return 0
    fields = query.split(",")
    if opts.no_throttle_field and "clocks_throttle_reasons.active" in fields:
        print('Field "clocks_throttle_reasons.active" is not a valid field to query.')
        return 2
    util, throttle = pairs(opts.util), pairs(opts.throttle)
    loop_ms = int(args[args.index("-lms") + 1]) if "-lms" in args else None
    values = {"utilization.gpu": lambda g: util.get(g, "90"),
              "memory.used": lambda g: "120000", "power.draw": lambda g: "612.5",
              "clocks.sm": lambda g: "1980", "temperature.gpu": lambda g: "61",
              "clocks_throttle_reasons.active": lambda g: throttle.get(g, "0x0000000000000000")}
    while True:
        for g in gpus:
            print(", ".join(g if f == "index" else values[f](g) for f in fields), flush=True)
        if loop_ms is None:
            return 0
        time.sleep(loop_ms / 1000)


if __name__ == "__main__":
    sys.exit(main())
