"""The value rules the Kubernetes API server applies beyond an object's schema (its
`apimachinery/pkg/util/validation`): DNS-1123/1035 names, label keys and values, resource
quantities, host paths. Each check returns why a value is refused, or None; `k8s_spec.py`
refuses dspark's settings with them, `k8s_schema.py` checks every object's names with them.
"""

from __future__ import annotations

import re
from decimal import Decimal

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(_LABEL)
DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
INT32_MAX = 2**31 - 1


def dns1123_label(value: str) -> str | None:
    if len(value) > 63 or not DNS1123_LABEL.fullmatch(value):
        return ("is not a DNS-1123 label (at most 63 lower-case letters, digits and '-', "
                "starting and ending with a letter or digit)")
    return None


def dns1035_label(value: str) -> str | None:
    if len(value) > 63 or not DNS1035_LABEL.fullmatch(value):
        return ("is not a DNS-1035 label (at most 63 lower-case letters, digits and '-', "
                "starting with a letter, ending with a letter or digit)")
    return None


def dns1123_subdomain(value: str) -> str | None:
    if len(value) > 253 or not DNS1123_SUBDOMAIN.fullmatch(value):
        return ("is not a DNS-1123 subdomain (at most 253 lower-case letters, digits, '-' "
                "and '.', starting and ending with a letter or digit)")
    return None


def label_key(value: str) -> str | None:
    prefix, _, name = value.rpartition("/")
    if (prefix and dns1123_subdomain(prefix)) or len(name) > 63 \
            or not QUALIFIED_NAME.fullmatch(name):
        return ("is not a label key ([prefix/]name: a DNS subdomain prefix, a name of at most "
                "63 letters, digits, '-', '_' and '.')")
    return None


def label_value(value: str) -> str | None:
    if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
        return ("is not a label value (at most 63 letters, digits, '-', '_' and '.', starting "
                "and ending with a letter or digit)")
    return None


def env_name(value: str) -> str | None:
    if not ENV_NAME.fullmatch(value):
        return "is not an environment variable name Kubernetes accepts ([-._a-zA-Z][-._a-zA-Z0-9]*)"
    return None


def quantity(value: str, positive: bool = True) -> str | None:
    """Why `value` is no resource quantity (`64Gi`, `500m`, `96`), by the kubernetes client's
    own parser; a zero or negative one where it must be positive."""
    from kubernetes.utils.quantity import parse_quantity

    try:
        parsed = parse_quantity(value)
    except (ValueError, ArithmeticError):
        return "is not a Kubernetes quantity (e.g. 64Gi, 1000Mi, 500m, 96)"
    if positive and parsed <= Decimal(0):
        return "must be more than zero"
    return None


def host_path(value: str) -> str | None:
    if not value.startswith("/"):
        return "is not an absolute path (a hostPath must be one)"
    if ".." in value.split("/"):
        return "holds '..' (the API server refuses a path that steps back)"
    return None
