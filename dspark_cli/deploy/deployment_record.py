"""What a cluster engine runs for dspark, written to the run directory the moment it exists
(`deployment.json`): should dspark be killed (`kill -9`, the OOM killer) no teardown runs, and
the record still names the job or objects and the shell lines that end them."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

from dspark_cli.console import progress
from dspark_cli.paths import DEPLOYMENT_JSON


def slurm_cancel(job: str) -> list[str]:
    return [shlex.join(["scancel", job])]


def k8s_delete(kubectl_argv: Sequence[str], manifest: Path, secret: str | None) -> list[str]:
    """`kubectl_argv`: the client's `kubectl [--namespace NS]` prefix."""
    lines = [shlex.join([*kubectl_argv, "delete", "-f", str(manifest)])]
    if secret is not None:
        lines.append(shlex.join([*kubectl_argv, "delete", "secret", secret]))
    return lines


def record_deployment(directory: Path, deployment: str, cancel: Sequence[str]) -> Path:
    """Write the record and say how to end the deployment by hand."""
    path = directory / DEPLOYMENT_JSON
    path.write_text(json.dumps({"deployment": deployment, "cancel": list(cancel)}, indent=2)
                    + "\n")
    progress(f"{deployment} is recorded in {path}; should dspark die before it ends it: "
             + " && ".join(cancel))
    return path
