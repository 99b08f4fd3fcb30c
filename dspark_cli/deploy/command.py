"""`dspark serve deploy=slurm|k8s`: the plan's node layout handed to a cluster engine.

The preflight rules that need no machine run first (the machine is the cluster's, not this
one); then `--dry-run` prints the sbatch script or the manifests and starts nothing. Without
it, Slurm gets the job (submitted, followed until healthy, cancelled on Ctrl-C) and Kubernetes
gets manifests written to the run directory with the `kubectl apply` line to use, or, with
`--apply`, applied through kubectl and followed like the Slurm job (deleted on Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from dspark_cli.config.plain import plain
from dspark_cli.console import progress
from dspark_cli.deploy.k8s_manifests import (
    K8sSpec,
    create_secret_line,
    image_problem,
    manifests,
    secret_keys,
)
from dspark_cli.deploy.node_script import url_refs
from dspark_cli.deploy.sbatch import SbatchSpec, sbatch_script
from dspark_cli.deploy.targets import CLUSTER_TARGETS
from dspark_cli.errors import CheckFailed, UsageError
from dspark_cli.launch import checks
from dspark_cli.launch.layout import NodeLayout, node_layout
from dspark_cli.launch.layout_render import layout_dict
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.run_files import MANIFESTS_YAML
from dspark_cli.status import Finding, Status

SCRIPT_NAME = "job.sbatch"


def sbatch_spec(cfg: DictConfig) -> SbatchSpec:
    s = cfg.deploy.slurm
    return SbatchSpec(job_name=str(s.job_name), time=str(s.time), partition=s.partition,
                      account=s.account, qos=s.qos, extra=tuple(str(x) for x in s.sbatch),
                      setup=tuple(str(x) for x in s.setup),
                      gpus=str(cfg.hw.platform) != "cpu")


def k8s_spec(cfg: DictConfig) -> K8sSpec:
    k = plain(cfg.deploy.k8s)
    return K8sSpec(platform=str(cfg.hw.platform), model_path=str(cfg.model.path), **k)


def k8s_objects(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout) -> list[dict[str, Any]]:
    """The manifests, validated offline (CheckFailed names every problem)."""
    from dspark_cli.deploy.k8s_schema import require_valid_manifests

    objects = manifests(layout, k8s_spec(cfg), plan.env)
    require_valid_manifests(objects)
    return objects


def secret_line(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout) -> str | None:
    """`kubectl create secret ...` for the Secret the manifests refer to, or None."""
    return create_secret_line(k8s_spec(cfg), secret_keys(layout, plan.env))


def secret_comment(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout) -> str:
    """YAML comment lines above the manifests: the Secret to create first, and which URL each
    `DSPARK_URL_PASSWORD_N` is the password of. Empty when the objects need no Secret."""
    line = secret_line(cfg, plan, layout)
    if line is None:
        return ""
    refs = url_refs(layout, plan.env)
    lines = ["The Secret these objects take their secrets from (never written here); create it",
             "first, with the variables set in your shell:", f"  {line}",
             *(f"{var}: the password in {text}" for var, text in refs.where.items())]
    return "".join(f"# {ln}\n" for ln in lines)


def target_findings(cfg: DictConfig) -> tuple[Finding, ...]:
    """The target's own checks: the image pinned by digest (k8s)."""
    if str(cfg.deploy.target) != "k8s":
        return ()
    problem = image_problem(k8s_spec(cfg).image)
    return (Finding("k8s-image-pinned", Status.failed if problem else Status.passed,
                    problem or "the image is pinned by digest", "deploy.k8s.image"),)


def _text(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout) -> str:
    if str(cfg.deploy.target) == "slurm":
        return sbatch_script(layout, sbatch_spec(cfg), plan.env)
    from dspark_cli.deploy.k8s_render import to_yaml

    return secret_comment(cfg, plan, layout) + to_yaml(k8s_objects(cfg, plan, layout))


def _json(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout) -> dict[str, Any]:
    if str(cfg.deploy.target) == "slurm":
        return {"script": _text(cfg, plan, layout)}
    spec = k8s_spec(cfg)
    keys = secret_keys(layout, plan.env)
    return {"manifests": k8s_objects(cfg, plan, layout),
            "secret": {"name": spec.secret_name, "keys": keys,
                       "create": create_secret_line(spec, keys)}}


def run(cfg: DictConfig, plan: LaunchPlan, opts: argparse.Namespace) -> int:
    target = str(cfg.deploy.target)
    if target not in CLUSTER_TARGETS:
        raise UsageError(f"deploy.target={target!r} is not a deploy target here; use "
                         "deploy=local, deploy=slurm or deploy=k8s")
    layout = node_layout(cfg, plan)
    findings = (*checks.check(cfg, plan, machine=None, ask_vllm=opts.validate),
                *target_findings(cfg))
    if not opts.dry_run and any(f.failed for f in findings):
        checks.print_findings(findings)
        raise CheckFailed("preflight failed; nothing was submitted or written (details above).")
    if opts.dry_run:
        if opts.json:
            print(json.dumps({"target": target, "layout": layout_dict(layout),
                              **_json(cfg, plan, layout),
                              "preflight": [f.to_dict() for f in findings]}, indent=2))
        else:
            sys.stdout.write(_text(cfg, plan, layout))
        checks.print_findings(findings)
        return checks.exit_code(findings)
    checks.print_findings(findings)
    if target == "slurm":
        from dspark_cli.deploy.slurm_job import require_clients

        require_clients()  # before anything is written
    from dspark_cli.launch.prepare import ensure_model
    from dspark_cli.launch.record import run_dir, write_config

    write = target == "k8s" and not opts.apply
    text = _text(cfg, plan, layout) if write else None  # refused before writing
    directory = run_dir()
    write_config(directory, cfg)
    if text is not None:
        return _write_manifests(text, directory, secret_line(cfg, plan, layout))
    ensure_model(cfg)
    return _submit(cfg, plan, layout, directory)


def _write_manifests(text: str, directory: Path, secret: str | None) -> int:
    path = directory / MANIFESTS_YAML
    path.write_text(text)
    progress("manifests written; apply them with the command(s) on stdout"
             + (" (the Secret first, from your shell's variables)" if secret else ""))
    if secret:
        print(secret)
    print(f"kubectl apply -f {path}")
    return 0


def _submit(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout, directory: Path) -> int:
    """The job or the applied manifests (`--apply`) through the one server session
    (`deploy/cluster_run.py`: `slurm_run.py`, `k8s_run.py`): started, followed until healthy and
    then until it ends; Ctrl-C/SIGTERM cancel or delete it."""
    from dspark_cli.deploy.cluster_run import cluster_target
    from dspark_cli.server import foreground

    return foreground.serve(cluster_target(cfg, plan, layout, directory))
