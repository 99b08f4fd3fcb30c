"""A cluster target's dry run as JSON: the target, its node layout (secrets redacted), what it
renders, and the preflight."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspark_cli.launch import vllm_options
from dspark_cli.launch.layout import NodeLayout
from dspark_cli.launch.render import layout_dict
from dspark_cli.status import Finding


def cluster_json(target: str, layout: NodeLayout, rendered: Mapping[str, Any],
                 findings: tuple[Finding, ...]) -> dict[str, Any]:
    return {"target": target, "layout": layout_dict(layout), **rendered,
            "vllm_options": vllm_options.source().to_dict(),
            "preflight": [f.to_dict() for f in findings]}
