"""Offline validation of Kubernetes objects: the official client's models for core objects,
dspark's LWS schema for the LeaderWorkerSet's own fields; every kind of mistake is caught."""

from __future__ import annotations

import copy

import pytest

from dspark_cli.deploy.k8s_schema import problems, require_valid_manifests
from dspark_cli.errors import CheckFailed

POD = {"metadata": {"labels": {"app": "x"}},
       "spec": {"containers": [{"name": "vllm", "image": "r/x@sha256:" + "a" * 64,
                                "ports": [{"containerPort": 8000, "name": "http"}]}]}}
# The shape of LWS's own vLLM example (docs/examples/vllm), trimmed.
LWS = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
       "metadata": {"name": "vllm"},
       "spec": {"replicas": 2, "leaderWorkerTemplate": {
           "size": 2, "restartPolicy": "RecreateGroupOnPodRestart",
           "leaderTemplate": POD, "workerTemplate": copy.deepcopy(POD)}}}
DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "vllm"},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
                       "template": POD}}
SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "vllm"},
           "spec": {"selector": {"app": "x"},
                    "ports": [{"port": 8000, "targetPort": "http"}]}}


def edited(obj, path, value):
    obj = copy.deepcopy(obj)
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return obj


def test_good_objects_pass():
    assert problems([LWS, DEPLOYMENT, SERVICE]) == []
    require_valid_manifests([LWS, DEPLOYMENT, SERVICE])


WORKER = ("spec", "leaderWorkerTemplate", "workerTemplate")


@pytest.mark.parametrize(("obj", "path", "value", "where"), [
    # the LWS's own fields (the schema)
    (LWS, ("spec", "leaderWorkerTemplate", "size"), "2", "spec.leaderWorkerTemplate.size"),
    (LWS, ("spec", "leaderWorkerTemplate", "size"), 0, "spec.leaderWorkerTemplate.size"),
    (LWS, ("spec", "leaderWorkerTemplate", "size"), True, "spec.leaderWorkerTemplate.size"),
    (LWS, ("spec", "leaderWorkerTemplate", "restartPolicy"), "Always",
     "spec.leaderWorkerTemplate.restartPolicy"),
    (LWS, ("spec", "leaderWorkerTemplate", "groupSize"), 2, "spec.leaderWorkerTemplate"),
    (LWS, ("spec", "replica"), 2, "spec"),
    (LWS, ("apiVersion",), "leaderworkerset.x-k8s.io/v2", "apiVersion"),
    (LWS, ("spec", "startupPolicy"), "Whenever", "spec.startupPolicy"),
    # core objects inside it (the client's models)
    (LWS, (*WORKER, "spec", "containers", 0, "imag"), "x",
     "spec.leaderWorkerTemplate.workerTemplate.spec.containers.0.imag"),
    (LWS, (*WORKER, "spec", "containers", 0, "ports", 0, "containerPort"), "8000",
     "spec.leaderWorkerTemplate.workerTemplate.spec.containers.0.ports.0.containerPort"),
    (LWS, ("metadata", "labels"), ["a"], "metadata.labels"),
    # core objects
    (DEPLOYMENT, ("spec", "replicas"), "1", "spec.replicas"),
    (DEPLOYMENT, ("spec", "template", "spec", "volumes"), [{"name": "m", "hostpath": {}}],
     "spec.template.spec.volumes.0.hostpath"),
    (SERVICE, ("spec", "ports", 0, "port"), 8000.5, "spec.ports.0.port"),
    (SERVICE, ("spec", "selectors"), {}, "spec.selectors"),
])
def test_each_mistake_is_named(obj, path, value, where):
    found = problems([LWS, edited(obj, path, value)])
    assert [p.path for p in found] == [where], found
    with pytest.raises(CheckFailed, match="problem"):
        require_valid_manifests([edited(obj, path, value)])


def test_missing_required_and_unknown_kinds():
    no_template = copy.deepcopy(LWS)
    del no_template["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert any("workerTemplate" in p.message for p in problems([no_template]))
    no_spec = {k: v for k, v in DEPLOYMENT.items() if k != "spec"}
    assert [p.path for p in problems([no_spec])] == ["spec"]
    assert problems([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}])
    assert problems(["not a mapping"])
