"""`deploy=k8s`'s entry: the plan's nodes as Kubernetes objects (a Deployment for one node, a
LeaderWorkerSet for several; `manifests.py` builds them, `validation.py` checks them offline).
`serve` writes them for the operator to apply (or applies them with `--apply`); `smoke` and
`bench` apply and follow them (`run.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark_cli.console import progress
from dspark_cli.deploy.cluster import cluster_json, url_refs
from dspark_cli.deploy.k8s.manifests import (
    K8sSpec,
    apply_line,
    create_secret_line,
    image_problem,
    manifests,
    secret_keys,
    to_yaml,
)
from dspark_cli.deploy.k8s.run import kubernetes_run
from dspark_cli.deploy.k8s.validation import require_valid_manifests
from dspark_cli.deploy.target import DeployTarget, Launch
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.launch.record import write_config
from dspark_cli.paths import MANIFESTS_YAML
from dspark_cli.server.deployment import Deployment
from dspark_cli.status import Finding, Status

if TYPE_CHECKING:
    from dspark_cli.config.schema import LaunchConf


def k8s_spec(cfg: LaunchConf) -> K8sSpec:
    """`deploy.k8s`, the CPU and memory requests defaulting to the profile's node."""
    k = cfg.deploy.k8s
    assert cfg.hw is not None  # composed by every command that launches (null: verify-checkpoint's)
    node_cpus, node_memory = cfg.hw.node_cpus, cfg.hw.node_memory
    return K8sSpec(
        name=k.name, image=k.image, platform=str(cfg.hw.platform),
        model_path=str(cfg.model.path), model_pvc=k.model_pvc,
        model_host_path=k.model_host_path, namespace=k.namespace, replicas=k.replicas,
        shm_size=k.shm_size, secret_name=k.secret_name, probe_period_s=k.probe_period_s,
        startup_failure_threshold=k.startup_failure_threshold,
        readiness_failure_threshold=k.readiness_failure_threshold,
        liveness_period_s=k.liveness_period_s,
        liveness_failure_threshold=k.liveness_failure_threshold,
        probe_timeout_s=k.probe_timeout_s, node_selector=k.node_selector,
        cpu=k.cpu or (None if node_cpus is None else str(node_cpus)),
        memory=k.memory or (None if node_memory is None else str(node_memory)),
        nccl_socket_ifname=k.nccl_socket_ifname, gloo_socket_ifname=k.gloo_socket_ifname)


def k8s_objects(cfg: LaunchConf, plan: LaunchPlan) -> list[dict[str, Any]]:
    """The manifests, validated offline (CheckFailed names every problem)."""
    objects = manifests(plan.layout, k8s_spec(cfg), plan.env)
    require_valid_manifests(objects)
    return objects


def secret_line(cfg: LaunchConf, plan: LaunchPlan) -> str | None:
    """`kubectl create secret ...` for the Secret the manifests refer to, or None."""
    return create_secret_line(k8s_spec(cfg), secret_keys(plan.layout, plan.env))


def secret_comment(cfg: LaunchConf, plan: LaunchPlan) -> str:
    """YAML comment lines above the manifests: the Secret to create first, and which URL each
    `DSPARK_URL_PASSWORD_N` is the password of. Empty when the objects need no Secret."""
    line = secret_line(cfg, plan)
    if line is None:
        return ""
    refs = url_refs(plan.layout, plan.env)
    lines = ["The Secret these objects take their secrets from (never written here); create it",
             "first, with the variables set in your shell:", f"  {line}",
             *(f"{var}: the password in {text}" for var, text in refs.where.items())]
    return "".join(f"# {ln}\n" for ln in lines)


def findings(cfg: LaunchConf) -> tuple[Finding, ...]:
    """The image pinned by digest."""
    problem = image_problem(k8s_spec(cfg).image)
    return (Finding("k8s-image-pinned", Status.failed if problem else Status.passed,
                    problem or "the image is pinned by digest", "deploy.k8s.image"),)


def render(cfg: LaunchConf, plan: LaunchPlan) -> str:
    return secret_comment(cfg, plan) + to_yaml(k8s_objects(cfg, plan))


def render_json(cfg: LaunchConf, plan: LaunchPlan, found: tuple[Finding, ...]) -> dict[str, Any]:
    spec = k8s_spec(cfg)
    keys = secret_keys(plan.layout, plan.env)
    return cluster_json("k8s", plan.layout, {
        "manifests": k8s_objects(cfg, plan),
        "secret": {"name": spec.secret_name, "keys": keys,
                   "create": create_secret_line(spec, keys)}}, found)


def hand_off(cfg: LaunchConf, plan: LaunchPlan, directory: Path) -> int:
    """The manifests written into `directory` with the lines that apply them on stdout."""
    text = render(cfg, plan)  # refused before anything is written
    secret = secret_line(cfg, plan)
    write_config(directory, cfg)
    path = directory / MANIFESTS_YAML
    path.write_text(text)
    progress("manifests written; apply them with the command(s) on stdout"
             + (" (the Secret first, from your shell's variables)" if secret else ""))
    if secret:
        print(secret)
    print(apply_line(path))
    return 0


def deployment(launch: Launch, directory: Path) -> Deployment:
    return kubernetes_run(launch.plan, k8s_spec(launch.cfg), directory,
                          stop_timeout_s=float(launch.cfg.server.stop_grace_s))


TARGET = DeployTarget(
    name="k8s",
    what="Kubernetes deployment",
    here=False,
    render=render,
    render_json=render_json,
    findings=findings,
    deployment=deployment,
    hand_off=hand_off,
)
