"""What a kubelet makes of a container's spec, for the tests (the fake `kubectl` builds on it).

`container_env` resolves a container's `env` as the kubelet does: `value`, `valueFrom.
secretKeyRef` from a Secret's data, and `$(VAR)` references to earlier entries (`$$` escapes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_REF = re.compile(r"\$(\$|\(([A-Za-z_][A-Za-z0-9_.-]*)\))")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: `$$` is `$`, an unknown `$(VAR)` stays as written."""
    def one(m: re.Match[str]) -> str:
        if m.group(1) == "$":
            return "$"
        return env.get(m.group(2), m.group(0))

    return _REF.sub(one, text)


def container_env(container: Mapping[str, Any],
                  secrets: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """A container's environment from its spec; KeyError names a Secret or key that is missing
    (the kubelet's CreateContainerConfigError)."""
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        if "valueFrom" in entry:
            ref = entry["valueFrom"]["secretKeyRef"]
            env[entry["name"]] = secrets[ref["name"]][ref["key"]]
        else:
            env[entry["name"]] = expand(str(entry.get("value", "")), env)
    return env
