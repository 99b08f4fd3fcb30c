"""Offline validation of Kubernetes objects: the official client's models for core objects,
the real LWS CRD for the LeaderWorkerSet, the API server's name rules for every object; every
kind of mistake is caught."""

from __future__ import annotations

import copy

import pytest

from dspark_cli.deploy.k8s.validation import problems, require_valid_manifests
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
    (LWS, ("spec", "leaderWorkerTemplate", "groupSize"), 2,
     "spec.leaderWorkerTemplate.groupSize"),
    (LWS, ("spec", "replica"), 2, "spec.replica"),
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


# --- the LeaderWorkerSet against the real CRD (dspark_cli/deploy/k8s/leaderworkerset-crd.yaml.gz)

TEMPLATE = ("spec", "leaderWorkerTemplate")


@pytest.mark.parametrize(("path", "value"), [
    ((*TEMPLATE, "restartPolicy"), "Default"),  # in the CRD's enum, not in a hand-written one
    ((*TEMPLATE, "subGroupPolicy"), {"subGroupPolicyType": "LeaderExcluded", "subGroupSize": 1}),
    (("spec", "replicas"), 1_000_000),
    (("spec", "rolloutStrategy"), {"type": "RollingUpdate", "rollingUpdateConfiguration": {
        "maxSurge": "50%", "maxUnavailable": 1, "partition": 0}}),
    (("spec", "networkConfig"), {"subdomainPolicy": "UniquePerReplica"}),
    ((*TEMPLATE, "size"), 2147483647),
])
def test_what_the_real_crd_accepts_passes(path, value):
    assert problems([edited(LWS, path, value)]) == []


@pytest.mark.parametrize(("path", "value", "where"), [
    # the hand-written schema's `type` is `subGroupPolicyType` in the CRD
    ((*TEMPLATE, "subGroupPolicy"), {"type": "LeaderExcluded", "subGroupSize": 1},
     "spec.leaderWorkerTemplate.subGroupPolicy.type"),
    (("spec", "replicas"), 1_000_001, "spec.replicas"),  # the CRD's maximum
    (("spec", "replicas"), -1, "spec.replicas"),
    (("spec", "replicas"), 2**31, "spec.replicas"),
    ((*TEMPLATE, "size"), 2**31, "spec.leaderWorkerTemplate.size"),  # int32
    ((*TEMPLATE, "size"), 2.0, "spec.leaderWorkerTemplate.size"),
    (("spec", "networkConfig"), {}, "spec.networkConfig"),  # subdomainPolicy is required
    (("spec", "rolloutStrategy"), {"rollingUpdateConfiguration": {}}, "spec.rolloutStrategy"),
    (("spec", "rolloutStrategy"), {"type": "Recreate"}, "spec.rolloutStrategy.type"),
    ((*WORKER, "spec", "containers", 0, "resources"), {"requests": {"memory": "lots"}},
     "spec.leaderWorkerTemplate.workerTemplate.spec.containers.0.resources.requests.memory"),
    ((*WORKER, "spec", "containers", 0, "ports"),
     [{"containerPort": 8000}, {"containerPort": 8000}],
     "spec.leaderWorkerTemplate.workerTemplate.spec.containers.0.ports"),
    ((*WORKER, "spec", "volumes"), [{"name": "m", "hostPath": {"path": "/m"}, "nfs": 1}],
     "spec.leaderWorkerTemplate.workerTemplate.spec.volumes.0.nfs"),
])
def test_what_the_real_crd_refuses_is_named(path, value, where):
    found = problems([edited(LWS, path, value)])
    assert found and {p.path for p in found} == {where}, found


def test_the_crd_is_the_shipped_copy_of_lws_own():
    import hashlib
    from importlib import resources

    from dspark_cli.deploy.k8s import validation

    data = resources.files("dspark_cli.deploy.k8s").joinpath(validation.CRD_FILE).read_bytes()
    assert hashlib.sha256(data).hexdigest() in (validation.__doc__ or "")
    crd = validation.crd()
    assert crd["spec"]["group"] == "leaderworkerset.x-k8s.io"
    assert crd["spec"]["names"]["kind"] == "LeaderWorkerSet"
    assert "subGroupPolicyType" in validation.schema_at(
        "spec.leaderWorkerTemplate.subGroupPolicy")["properties"]


@pytest.mark.parametrize(("obj", "path", "value", "where"), [
    (SERVICE, ("metadata", "name"), "0vllm", "metadata.name"),  # a DNS-1035 label
    (SERVICE, ("metadata", "name"), "vllm.leader", "metadata.name"),
    (LWS, ("metadata", "name"), "Vllm", "metadata.name"),
    (LWS, ("metadata", "name"), "v" * 64, "metadata.name"),
    (DEPLOYMENT, ("metadata", "name"), "vllm_1", "metadata.name"),
    (DEPLOYMENT, ("metadata", "namespace"), "Prod", "metadata.namespace"),
    (DEPLOYMENT, ("metadata", "labels"), {"app": "x" * 64}, "metadata.labels.app"),
    (DEPLOYMENT, ("metadata", "labels"), {"a b": "x"}, "metadata.labels.a b"),
])
def test_names_the_api_server_refuses_are_named(obj, path, value, where):
    assert [p.path for p in problems([edited(obj, path, value)])] == [where]


def test_a_dotted_deployment_name_is_a_dns_subdomain():
    assert problems([edited(DEPLOYMENT, ("metadata", "name"), "vllm.v4")]) == []
