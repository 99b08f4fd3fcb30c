"""dspark's parallel SHA-256 vs `xargs -P$(nproc) -n1 openssl dgst -sha256` vs `sha256sum`,
over the same files in the same run, with a warm page cache.

    PYTHONPATH=. python benchmarks/checkpoint_hashing.py --files 8 --size-mib 256
    PYTHONPATH=. python benchmarks/checkpoint_hashing.py --workers 1,2,4,8,16 --json-out h.json

OpenSSL uses the CPU's SHA instructions; so does Python's hashlib, which is OpenSSL underneath,
so the goal is to lose nothing to Python: at least 0.9x the parallel OpenSSL throughput. Every
method's digests are compared, so a fast wrong answer cannot win. The files are deleted at the
end unless --keep is given.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from dspark_cli.checkpoint.content import (
    SHA256,
    HashJob,
    default_workers,
    hash_files,
)

BLOCK = 16 * 1024 * 1024


def make_files(directory: Path, count: int, size: int) -> list[Path]:
    """Distinct files of random-looking data (a random block, a per-file prefix)."""
    directory.mkdir(parents=True, exist_ok=True)
    block = os.urandom(BLOCK)
    paths = []
    for i in range(count):
        path = directory / f"shard-{i:05d}.bin"
        with open(path, "wb") as fh:
            fh.write(i.to_bytes(8, "little"))
            left = size - 8
            while left > 0:
                n = min(left, BLOCK)
                fh.write(block[:n])
                left -= n
        paths.append(path)
    return paths


def warm(paths: list[Path]) -> None:
    for path in paths:
        with open(path, "rb", buffering=0) as fh:
            while fh.read(BLOCK):
                pass


def run_dspark(paths: list[Path], workers: int) -> dict[str, str]:
    results = hash_files([HashJob(p.name, p) for p in paths], workers=workers, progress=False)
    return {name: o.digests[SHA256] for name, o in results.items()}


def run_shell(command: str, paths: list[Path]) -> dict[str, str]:
    """Run a shell pipeline over the file names (stdin) and parse `<hex>  <name>` lines."""
    done = subprocess.run(["bash", "-c", command], input="\n".join(map(str, paths)),
                          capture_output=True, text=True, check=True)
    out = {}
    for line in done.stdout.splitlines():
        if line.startswith("SHA2-256(") or line.startswith("SHA256("):  # openssl's own format
            name, digest = line.split(")= ")
            out[Path(name.split("(", 1)[1]).name] = digest.strip()
        else:
            digest, name = line.split(maxsplit=1)
            out[Path(name.lstrip("*")).name] = digest
    return out


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children: contention-free work measure."""
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measure(fn, repeats: int) -> tuple[float, float, dict[str, str]]:
    """Best wall time of `repeats` runs, that run's CPU seconds, and the digests."""
    best, cpu, digests = float("inf"), 0.0, {}
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        digests = fn()
        wall = time.perf_counter() - start
        if wall < best:
            best, cpu = wall, _cpu_seconds() - cpu_start
    return best, cpu, digests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/dspark-hash-bench"))
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--workers", default="", help="comma-separated counts (default 1..nproc)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    nproc = default_workers()
    counts = [int(w) for w in args.workers.split(",") if w] or sorted(
        {1, *(w for w in (2, 4, 8, 16, 32, 64) if w < nproc), nproc})
    size = args.size_mib * 1024 * 1024
    total = args.files * size
    print(f"{args.files} files x {args.size_mib} MiB = {total / 2**30:.2f} GiB in {args.dir}; "
          f"nproc={nproc}; {os.uname().machine}; Python {sys.version.split()[0]}", flush=True)
    start = time.perf_counter()
    paths = make_files(args.dir, args.files, size)
    print(f"wrote the files in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    try:
        warm(paths)
        methods = {
            f"openssl: xargs -P{nproc} -n1 openssl dgst -sha256":
                lambda: run_shell(f"xargs -P{nproc} -n1 openssl dgst -sha256", paths),
            "sha256sum (one process)": lambda: run_shell("xargs sha256sum", paths),
            f"sha256sum: xargs -P{nproc} -n1 sha256sum":
                lambda: run_shell(f"xargs -P{nproc} -n1 sha256sum", paths),
        }
        for w in counts:
            methods[f"dspark hash_files, {w} worker{'s' if w > 1 else ''}"] = (
                lambda w=w: run_dspark(paths, w))
        rows, reference = [], None
        for name, fn in methods.items():
            repeats = 1 if name.startswith("sha256sum (one") else args.repeats
            seconds, cpu, digests = measure(fn, repeats)
            reference = reference or digests
            if digests != reference:
                print(f"DIGESTS DIFFER: {name}", file=sys.stderr)
                return 1
            rows.append({"method": name, "seconds": round(seconds, 3),
                         "gb_per_s": round(total / seconds / 1e9, 3),
                         "gb_per_cpu_s": round(total / cpu / 1e9, 3)})
            print(f"  {name:<48} {seconds:8.3f} s  {total / seconds / 1e9:7.2f} GB/s",
                  file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)

    openssl = rows[0]["gb_per_s"]
    best = max(r["gb_per_s"] for r in rows if r["method"].startswith("dspark"))
    print(f"\n{'method':<50} {'seconds':>8} {'GB/s':>7} {'x openssl':>9} {'GB/cpu-s':>9}")
    for r in rows:
        print(f"{r['method']:<50} {r['seconds']:8.3f} {r['gb_per_s']:7.2f} "
              f"{r['gb_per_s'] / openssl:9.2f} {r['gb_per_cpu_s']:9.2f}")
    verdict = "PASS" if best >= 0.9 * openssl else "FAIL"
    print(f"\nbest dspark / parallel openssl = {best / openssl:.2f} (goal >= 0.90): {verdict}; "
          f"all digests agree")
    if args.json_out:
        args.json_out.write_text(json.dumps({
            "files": args.files, "size_mib": args.size_mib, "nproc": nproc, "rows": rows,
            "ratio_best_dspark_vs_openssl": round(best / openssl, 3),
        }, indent=2))
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
