"""Reading a deployment's pods (`kubectl get pods -o json`'s items) into what the run needs to
know: whether a pod stopped serving and why, whether it runs, which node of the layout it is.
Pure: a pod's dict in, a verdict out."""

from __future__ import annotations

from typing import Any

WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
# A container waiting for one of these will not run without a change: the deployment ended.
STUCK = {"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
         "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}


def pod_problem(pod: dict[str, Any]) -> str | None:
    """Why a pod stopped serving, or None while it is pending or running."""
    name = pod.get("metadata", {}).get("name", "?")
    status = pod.get("status", {})
    if status.get("phase") == "Failed":
        return f"pod {name} failed ({status.get('reason') or status.get('message') or 'Failed'})"
    for c in status.get("containerStatuses", []):
        state, last = c.get("state", {}), c.get("lastState", {})
        exit_code = (last.get("terminated") or state.get("terminated") or {}).get("exitCode")
        exited = f", last exit code {exit_code}" if exit_code is not None else ""
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in STUCK:
            message = f": {waiting['message']}" if waiting.get("message") else ""
            return f"pod {name}: {waiting['reason']}{exited}{message}"
        if "terminated" in state:
            t = state["terminated"]
            return f"pod {name}: container terminated ({t.get('reason', '?')}{exited})"
        if int(c.get("restartCount") or 0) > 0:
            return f"pod {name}: container restarted {c['restartCount']} time(s){exited}"
    return None


def pod_line(pod: dict[str, Any]) -> str:
    """`name phase[ ready]` for progress."""
    status = pod.get("status", {})
    ready = all(c.get("ready") for c in status.get("containerStatuses", [])) and bool(
        status.get("containerStatuses"))
    return f"{pod['metadata']['name']} {status.get('phase', '?')}{' ready' if ready else ''}"


def running(pod: dict[str, Any]) -> bool:
    """Whether a container of the pod runs (its logs can be followed, its port forwarded)."""
    return any("running" in c.get("state", {})
               for c in pod.get("status", {}).get("containerStatuses", []))


def node_index(pod: dict[str, Any]) -> int:
    """The pod's node in the layout: its LeaderWorkerSet worker index (0, the head, when it
    has none: a Deployment's pod)."""
    return int(pod["metadata"].get("labels", {}).get(WORKER_INDEX, "0") or 0)
