"""vLLM's own verdict on a planned command: its argument parser, `validate_parsed_serve_args`
and `create_engine_config()` (when config.json is local), run in a subprocess so dspark never
imports vLLM (its import-time side effects, logging and signal handlers, stay out too): seconds,
instead of a failure after a weight load.

The subprocess is this module: `python -m dspark_cli.vllm.accepts` with a JSON list (the argv
after `vllm serve`) on stdin prints one JSON object: {"ok": bool, "stage": ..., "error": ...}
(stage "import", with "module", when vLLM cannot be imported). A JSON list of such lists gets a
list of objects, one per argv. The answers a command has are held by the command (`Verdicts`)
and passed to each start.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

from dspark_cli.errors import MissingEngine
from dspark_cli.status import Finding, Status
from dspark_cli.vllm.options import serve_cli_args
from dspark_cli.vllm.shim import patch_version_lookup, require_engine

ACCEPTS_TIMEOUT_S = 300.0  # server.validate_timeout_s: importing vLLM takes a loaded host minutes
RULE, KEY = "vllm-accepts-command", "serving.extra_args"


def vllm_accepts_command(argv: Sequence[str], env: Mapping[str, str], label: str = "",
                         timeout_s: float = ACCEPTS_TIMEOUT_S,
                         asked: Verdicts | None = None) -> Finding:
    """vLLM's verdict on one `vllm serve ...` argv with its env; `label` (e.g. "node 1: ")
    starts the message; `asked`: the command's answers so far (None: ask afresh)."""
    return vllm_accepts_commands([argv], env, [label], timeout_s, asked)[0]


_Key = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]  # (argv, env)


class Verdicts:
    """vLLM's answers within one command, held by the command that asks and passed to each
    start: a command asked about again (validate's smoke, then the same arm in its bench) costs
    no second vLLM import, and commands taken along (`take_along`: a bench's arms) are asked
    with the next question in their environment."""

    def __init__(self) -> None:
        self.answers: dict[_Key, dict] = {}
        self.along: dict[tuple[tuple[str, str], ...], list[tuple[str, ...]]] = {}

    def take_along(self, argvs: Sequence[Sequence[str]], env: Mapping[str, str]) -> None:
        """Ask about `argvs` (in `env`) together with the next command asked about in `env`:
        a bench's arms in one vLLM import, taken when the first arm's preflight has passed and
        its model is there (a failing preflight costs no import; vLLM builds the engine
        config)."""
        self.along.setdefault(tuple(sorted(env.items())), []).extend(tuple(a) for a in argvs)


def vllm_accepts_commands(argvs: Sequence[Sequence[str]], env: Mapping[str, str],
                          labels: Sequence[str], timeout_s: float = ACCEPTS_TIMEOUT_S,
                          asked: Verdicts | None = None) -> tuple[Finding, ...]:
    """One finding per argv; those not in `asked` are asked in one subprocess (vLLM is
    imported once), with the commands `asked` takes along in `env`, which may take `timeout_s`
    seconds. The complete answers are added to `asked`."""
    require_engine()  # not installed: neither validated nor run, say what to install
    asked = asked if asked is not None else Verdicts()
    env_key = tuple(sorted(env.items()))
    keys = [(tuple(a), env_key) for a in argvs]
    along = [(a, env_key) for a in asked.along.pop(env_key, [])]
    missing = list(dict.fromkeys(k for k in (*keys, *along) if k not in asked.answers))
    if missing:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "dspark_cli.vllm.accepts"],
                input=json.dumps([list(argv[2:]) for argv, _ in missing]), capture_output=True,
                text=True, env={**os.environ, **env}, timeout=timeout_s)
            results = json.loads(done.stdout.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as e:
            return tuple(Finding(RULE, Status.failed, f"{label}vLLM's validator did not answer "
                                 f"({e}; server.validate_timeout_s)", KEY) for label in labels)
        for result in results:
            if result["stage"] == "import":
                raise MissingEngine(result["module"] or "vllm", result["error"])
        answers = dict(zip(missing, results, strict=True))
        # Kept: the complete answers. One given before the model's config.json is there (the
        # engine config not built) is asked again, once `ready()` has made the model.
        asked.answers.update((k, r) for k, r in answers.items()
                             if not r["ok"] or r["stage"] == "engine-config")
    else:
        answers = {}
    return tuple(_finding(asked.answers.get(k) or answers[k], label)
                 for k, label in zip(keys, labels, strict=True))


def _finding(result: dict, label: str) -> Finding:
    if not result["ok"]:
        return Finding(RULE, Status.failed, f"{label}vLLM rejects the command at "
                       f"{result['stage']}: {result['error']}", KEY)
    note = f" ({result['error']})" if result.get("error") else ""
    return Finding(RULE, Status.passed,
                   f"{label}vLLM accepts the command ({result['stage']}){note}", KEY)


def check(args: list[str]) -> dict:
    patch_version_lookup()
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.utils.argparse_utils import FlexibleArgumentParser

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
