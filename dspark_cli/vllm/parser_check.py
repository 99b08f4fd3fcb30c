"""Check a `vllm serve` command line with the installed vLLM's own parser, in seconds.

Run as `python -m dspark_cli.vllm.parser_check` with a JSON list (the argv after `vllm serve`) on
stdin; prints one JSON object: {"ok": bool, "stage": ..., "error": ...} (stage "import", with
"module", when vLLM cannot be imported). A JSON list of such lists gets a list of objects, one
per argv. A subprocess, so that
vLLM's import-time side effects (logging, signal handlers) stay out of dspark.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys


def check(args: list[str]) -> dict:
    from dspark_cli.vllm.shim import patch_version_lookup

    patch_version_lookup()
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        from dspark_cli.vllm.serve_args import serve_cli_args

        cli_args = serve_cli_args()
        make_arg_parser = cli_args.make_arg_parser
        validate_parsed_serve_args = cli_args.validate_parsed_serve_args
    except ModuleNotFoundError as e:  # vLLM or torch is not installed (or broken) here
        return {"ok": False, "stage": "import", "error": str(e), "module": e.name}

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            ns = parser.parse_args(args)
    except SystemExit:
        lines = [ln for ln in stderr.getvalue().splitlines() if ln.strip()]
        return {"ok": False, "stage": "parse", "error": lines[-1] if lines else "rejected"}
    ns.model = ns.model_tag
    try:
        validate_parsed_serve_args(ns)
    except Exception as e:
        return {"ok": False, "stage": "serve-args", "error": str(e)}
    if not os.path.isfile(os.path.join(str(ns.model), "config.json")):
        return {"ok": True, "stage": "serve-args",
                "error": "engine config not checked: no local config.json"}
    try:
        # A headless node (multi-node layouts) is built as vLLM's `run_headless` builds it.
        AsyncEngineArgs.from_cli_args(ns).create_engine_config(
            headless=bool(getattr(ns, "headless", False)))
    except Exception as e:
        return {"ok": False, "stage": "engine-config", "error": f"{type(e).__name__}: {e}"}
    return {"ok": True, "stage": "engine-config", "error": None}


if __name__ == "__main__":
    request = json.loads(sys.stdin.read())
    # One argv (a list of strings), or several (the nodes of a layout: one vLLM import for all).
    several = bool(request) and all(isinstance(a, list) for a in request)
    result = [check(a) for a in request] if several else check(request)
    sys.stdout.flush()
    print("\n" + json.dumps(result))
