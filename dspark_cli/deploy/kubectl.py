"""The `kubectl` client a managed Kubernetes run goes through, with the user's kubeconfig and
context: every API call has a timeout (kubectl's own `--request-timeout` and ours around the
process), and the long-running calls (logs --follow, port-forward) are processes the caller
stops with `stop_stream`."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from dspark_cli.errors import ServerError, UsageError
from dspark_cli.server import watchdog
from dspark_cli.server.watchdog import descendants, stop_group

REQUEST_TIMEOUT_S = 30.0  # one API call
STREAM_GRACE_S = 5.0  # a stream's SIGTERM before SIGKILL
CONNECT_TIMEOUT_S = 15.0  # `kubectl version` at start: does a cluster answer?
NO_KUBECTL = ("`kubectl` is not on PATH: deploy=k8s runs the deployment through kubectl with "
              "your kubeconfig and context; nothing was applied")


@dataclass(frozen=True)
class Kubectl:
    """The `kubectl` client with the user's kubeconfig and context, in one namespace."""

    namespace: str | None = None

    def argv(self, *args: str) -> list[str]:
        ns = ["--namespace", self.namespace] if self.namespace else []
        return ["kubectl", *ns, *args]

    @staticmethod
    def require() -> None:
        """UsageError when `kubectl` is not on PATH."""
        if shutil.which("kubectl") is None:
            raise UsageError(NO_KUBECTL, hint="install kubectl and select the cluster's "
                             "context, or print the manifests with `dspark serve deploy=k8s "
                             "--dry-run`")

    def run(self, *args: str, stdin: str | None = None, timeout: float = REQUEST_TIMEOUT_S,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """One API call, bounded by `timeout` (kubectl's own and ours)."""
        argv = self.argv(f"--request-timeout={max(1, int(timeout))}s", *args)
        try:
            done = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                                  timeout=timeout + 10)
        except FileNotFoundError as e:
            raise UsageError(NO_KUBECTL) from e
        except subprocess.TimeoutExpired as e:
            raise ServerError(f"`kubectl {' '.join(args[:2])}` did not answer within "
                              f"{timeout:.0f} s; is the cluster reachable?") from e
        if check and done.returncode != 0:
            raise ServerError(f"`kubectl {' '.join(args[:3])}` failed (exit {done.returncode}): "
                              f"{(done.stderr or done.stdout).strip()}")
        return done

    def stream(self, *args: str) -> subprocess.Popen[str]:
        """A long-running call (logs --follow, port-forward); the caller stops it, and its
    watchdog should dspark die."""
        self.require()
        return watchdog.popen(self.argv(*args), STREAM_GRACE_S, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def stop_stream(proc: subprocess.Popen[str] | None, grace_s: float = STREAM_GRACE_S) -> None:
    """End a `stream()` call: SIGTERM, then SIGKILL after `grace_s`."""
    if proc is None or proc.poll() is not None:
        return
    stop_group(proc.pid, grace_s, descendants(proc.pid))
    proc.wait(grace_s)
