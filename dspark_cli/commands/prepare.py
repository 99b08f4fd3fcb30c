"""`dspark prepare speed-bench SRC`: the seed protocol's request file from a local copy of the
SPEED-Bench release; stdout is the override that pins it (stderr says what was written).

    huggingface-cli download nvidia/SPEED-Bench --repo-type dataset --local-dir /data/sb
    dspark prepare speed-bench /data/sb
    dspark prepare speed-bench rows.jsonl --subset throughput_1k --out /data/speed_bench
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from dspark_cli.bench.dataset import prepare
from dspark_cli.cli.command import Command
from dspark_cli.cli.overrides import hydra_literal
from dspark_cli.console import print_json

DEFAULT_DIR = Path("data/speed_bench")  # conf/bench/speed_bench_throughput_1k.yaml's path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", choices=["speed-bench"], help="the benchmark's release")
    parser.add_argument("source", type=Path, metavar="SRC",
                        help="the release's local copy: a directory or a .jsonl/.parquet file")
    parser.add_argument("--subset", default="throughput_1k",
                        help="the split (default throughput_1k, the seed protocol's)")
    parser.add_argument("--out", type=Path, metavar="DIR", default=DEFAULT_DIR,
                        help="where <subset>.jsonl goes (default data/speed_bench, where the "
                        "seed protocol reads it: bench.dataset.path)")
    parser.add_argument("--drop-placeholders", action="store_true",
                        help="keep only rows the release holds in full (another set)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(cfg: None, opts: argparse.Namespace) -> int:
    """`cfg` is None: the command composes no config."""
    out = opts.out.expanduser() / f"{opts.subset}.jsonl"
    done = prepare(opts.source.expanduser(), opts.subset, out, opts.drop_placeholders)
    pin = [f"bench.dataset.sha256={done.sha256}"]
    if opts.out.expanduser().resolve() != DEFAULT_DIR.resolve():
        pin.insert(0, f"bench.dataset.path={hydra_literal(str(out.parent.resolve()))}")
    if opts.subset != "throughput_1k":
        pin.insert(0, f"bench.dataset.subset={opts.subset}")
    if opts.json:
        print_json({**done.to_dict(), "overrides": pin})
        return 0
    if done.repeated:
        print(f"dspark: warning: {done.repeated} of {done.rows} requests repeat an earlier "
              f"request's prompt (first: {done.first_repeat}): the set measures fewer distinct "
              "prompts than it holds, and a prefix cache serves the copies", file=sys.stderr)
    dropped = f" ({done.dropped} placeholder rows left out)" if done.dropped else ""
    quoted = " ".join(shlex.quote(p) for p in pin)
    print(f"dspark: wrote {done.out}: {done.rows} requests{dropped}, sha256 {done.sha256}; the "
          f"bench takes it with: dspark bench bench=speed_bench_throughput_1k {quoted}",
          file=sys.stderr)
    print(quoted)  # the overrides alone, shell words: eval "PIN=($(dspark prepare ...))"
    return 0


COMMAND = Command(
    name="prepare",
    examples=(
        ("dspark prepare speed-bench /data/sb", "the seed's set; stdout: its pin (shell words)"),
        ("dspark prepare speed-bench rows.jsonl --drop-placeholders", "complete rows only"),
        ("dspark prepare speed-bench /data/sb --subset throughput_2k", "another split"),
    ),
    add_arguments=add_arguments,
    run=run,
)
