"""vLLM's own verdict on a planned command: its argument parser, `validate_parsed_serve_args`
and `create_engine_config()` (when config.json is local), run in a subprocess (`parser_check`)
so dspark never imports vLLM: seconds, instead of a failure after a weight load."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.rules import Finding
from dspark_cli.status import Status

VALIDATE_TIMEOUT_S = 120.0
RULE, KEY = "vllm-accepts-command", "serving.extra_args"


def validate_with_vllm(plan: LaunchPlan) -> Finding:
    """A finding: vLLM accepts the command, or why not (not installed, rejected, no answer)."""
    from dspark_cli.vllm.shim import installed_vllm

    if installed_vllm() is None:
        return Finding(RULE, Status.failed, "vLLM is not installed here, so the command can "
                       "neither be validated nor run (on CPU: pip install 'dspark[cpu]')", None)
    env = {**os.environ, **plan.env_map}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dspark_cli.vllm.parser_check"],
            input=json.dumps(list(plan.argv[2:])), capture_output=True, text=True, env=env,
            timeout=VALIDATE_TIMEOUT_S)
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as e:
        return Finding(RULE, Status.failed, f"vLLM's validator did not answer ({e})", KEY)
    if not result["ok"]:
        return Finding(RULE, Status.failed,
                       f"vLLM rejects the command at {result['stage']}: {result['error']}", KEY)
    note = f" ({result['error']})" if result.get("error") else ""
    return Finding(RULE, Status.passed, f"vLLM accepts the command ({result['stage']}){note}",
                   KEY)
