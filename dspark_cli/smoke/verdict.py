"""The smoke's verdict and exit code, from its check results (pure).

Exit codes (README "Exit codes"): 0 every check passed or did not apply; 3 the server failed to
start or stay healthy (the `health`, `server_alive` or `liveness` check failed: a stall is a
server that stopped generating); 1 any other check failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dspark_cli.errors import ExitCode
from dspark_cli.smoke.observations import CheckResult

SERVER_CHECKS = ("health", "server_alive", "liveness")


@dataclass(frozen=True)
class Verdict:
    passed: bool
    exit_code: ExitCode
    summary: str


def decide(results: Sequence[CheckResult]) -> Verdict:
    failed = [r for r in results if r.failed]
    if not failed:
        return Verdict(True, ExitCode.OK, f"{len(results)} checks, none failed")
    server = [r for r in failed if r.name in SERVER_CHECKS]
    first = (server or failed)[0]
    code = ExitCode.SERVER if server else ExitCode.CHECK_FAILED
    names = ", ".join(r.name for r in failed)
    return Verdict(False, code, f"{names} failed: {first.evidence}")
