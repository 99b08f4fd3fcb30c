"""Secrets given as Hydra overrides never reach Hydra's own files.

Hydra writes the overrides and the (unresolved) config into `.hydra/`, `multirun.yaml`, its
launchers' job pickles and `--cfg` output. So before Hydra sees them, each secret in an override
(a secret-named `*.env.*` variable, a secret vLLM option under `serving.extra_args`, a URL
password anywhere) moves into this process's environment, and the override refers to it:
`+hw.env.HF_TOKEN=${oc.env:DSPARK_SECRET_HW_ENV_HF_TOKEN}`. The config resolves to the real
value where dspark needs it (the child's environment); every file Hydra writes holds the
reference. Child processes (multirun jobs) inherit the variable.
"""

from __future__ import annotations

import os
import re
from typing import Any

from dspark_cli.errors import UsageError
from dspark_cli.launch import secrets

PREFIX = "DSPARK_SECRET_"


def _secret_key(key: str) -> bool:
    """`<group>.env.<secret name>`, or a secret vLLM option under `serving.extra_args` (in
    any spelling vLLM's parser accepts, abbreviations included)."""
    parts = key.split(".")
    if len(parts) < 2:
        return False
    if parts[-2] == "extra_args":
        from dspark_cli.launch.vllm_options import resolve

        try:
            option = resolve(parts[-1])
        except UsageError:
            option = None
        if option is not None and option.dest in secrets.SECRET_OPTIONS:
            return True
    return secrets.secret_key(parts[-1], parts[-2])


def _var(key: str, suffix: str = "") -> str:
    return PREFIX + re.sub(r"[^A-Za-z0-9]", "_", key).upper() + suffix


def _quoted(text: str) -> str:
    """`text` as a single-quoted Hydra override value (interpolations inside still resolve)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _holds_secret(value: Any, key: str) -> bool:
    parts = key.split(".")
    return any(True for _ in secrets.values_in({parts[-1]: value}, parent=(parts[-2:-1] or
                                                                           [None])[0]))


def hide(overrides: list[str]) -> tuple[list[str], bool]:
    """The overrides with every secret moved into this process's environment, and whether
    any was. A secret inside a dict or sweep value is refused (give it its own override)."""
    if not any("://" in line or secrets.is_secret_name(line) for line in overrides):
        return overrides, False  # nothing to hide: Hydra's parser is not even loaded
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    out, hidden = [], False
    for line in overrides:
        try:
            override = parser.parse_override(line)
        except Exception:  # Hydra reports the syntax error itself, through the scrubbed output
            secrets.SCRUB.add(secrets.url_passwords(line))
            out.append(line)
            continue
        if override.is_delete() or override.value_type is None:
            out.append(line)
            continue
        key = override.key_or_group
        value = override.value()
        prefix = "++" if override.is_force_add() else "+" if override.is_add() else ""
        head = prefix + key + (f"@{override.package}" if override.package else "")
        scalar = isinstance(value, str | int | float) and not isinstance(value, bool)
        if scalar and _secret_key(key):
            os.environ[_var(key)] = str(value)
            secrets.SCRUB.add([str(value)])
            out.append(f"{head}=${{oc.env:{_var(key)}}}")
            hidden = True
        elif scalar and secrets.url_passwords(str(value)):
            text, parts, last = str(value), [], 0
            for i, m in enumerate(secrets.find_url_passwords(text), 1):
                var = _var(key, f"_URL_PASSWORD_{i}")
                os.environ[var] = m.value
                secrets.SCRUB.add([m.value])
                parts += [text[last:m.start], f"${{oc.env:{var}}}"]
                last = m.end
            out.append(f"{head}={_quoted(''.join(parts) + text[last:])}")
            hidden = True
        elif value is not None and not isinstance(value, bool) and (
                _secret_key(key) or secrets.url_passwords(line)
                or _holds_secret(value, key)):
            raise UsageError(f"`{key}` holds a secret inside a list, dict or sweep; give each "
                             "secret its own override (e.g. `+hw.env.HF_TOKEN=...`), so it is "
                             "never written.")
        else:
            out.append(line)
    return out, hidden
