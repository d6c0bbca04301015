"""Objects as the caches keep them (`compact.compact`): what readers read survives, what
nobody reads is gone, equal small leaves are one object, the argument is untouched."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from admission.kube import compact
from fitcore import kube, workload
from tests.gang import realistic as rl

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
MANAGED = [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:images": {}}}}]


def full_node() -> dict[str, Any]:
    """A Node as a kubelet reports it: most of it status nobody in fitgate reads."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "uid": "u-1", "resourceVersion": "42",
                     "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": MANAGED,
                     "labels": {"kubernetes.io/hostname": "n1", rl.RACK: "rack-1"},
                     "annotations": {"keep": "me", compact.LAST_APPLIED: "{\"big\": 1}"}},
        "spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
                 "unschedulable": True, "providerID": "kwok://n1"},
        "status": {
            "allocatable": {"cpu": "128", "memory": "1Ti", "pods": "110"},
            "capacity": {"cpu": "128", "memory": "1Ti", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True",
                            "lastHeartbeatTime": "2026-01-01T00:00:00Z"}],
            "images": [{"names": [f"registry.example.com/img-{i}@sha256:{i:064x}"],
                        "sizeBytes": 1000 + i} for i in range(50)],
            "nodeInfo": {"kubeletVersion": "v1.36.0", "machineID": "m"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "volumesInUse": ["v"], "volumesAttached": [{"name": "v", "devicePath": "/d"}]}}


def full_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "team", "uid": "u-2", "resourceVersion": "7",
                     "labels": {"app": "train", "kueue.x-k8s.io/podset": "main"},
                     "annotations": {"a": "b"}, "deletionTimestamp": "2026-01-01T00:00:09Z",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": "j", "uid": "u-j", "controller": True}],
                     "managedFields": MANAGED},
        "spec": {"nodeName": "n1", "schedulingGates": [{"name": "g"}],
                 "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "t"}],
                 "containers": [{"name": "main", "image": "i", "resources": {
                     "requests": {"cpu": "4", "memory": "8Gi"}, "claims": [{"name": "gpus"}]}}],
                 "affinity": {"podAntiAffinity": {REQUIRED: [
                     {"labelSelector": {"matchLabels": {"app": "train"}},
                      "topologyKey": "kubernetes.io/hostname"}]}}},
        "status": {"phase": "Running", "nominatedNodeName": "n1",
                   "conditions": [{"type": "PodScheduled", "status": "True"}],
                   "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "p1-gpus"}],
                   "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0,
                                          "imageID": "sha256:" + "0" * 64}],
                   "podIP": "10.1.0.1", "podIPs": [{"ip": "10.1.0.1"}],
                   "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}]}}


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[part]
    return obj


#: Every field of a Node or Pod that fitgate reads (fitcore's readers, the ledger's node
#: index, the release controller, pod affinity, the check's bookkeeping).
READ = {
    "Node": ["metadata.name", "metadata.uid", "metadata.resourceVersion",
             "metadata.creationTimestamp", "metadata.labels", "metadata.annotations.keep",
             "spec.taints", "spec.unschedulable", "spec.providerID", "status.allocatable",
             "status.capacity", "status.conditions"],
    "Pod": ["metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels",
            "metadata.annotations", "metadata.deletionTimestamp", "metadata.ownerReferences",
            "spec", "status.phase", "status.nominatedNodeName", "status.conditions",
            "status.resourceClaimStatuses"],
}
GONE = {
    "Node": ["metadata.managedFields", f"metadata.annotations.{compact.LAST_APPLIED}",
             *(f"status.{f}" for f in compact.UNREAD_STATUS["Node"])],
    "Pod": ["metadata.managedFields", *(f"status.{f}" for f in compact.UNREAD_STATUS["Pod"])],
}


@pytest.mark.parametrize("make", [full_node, full_pod], ids=["Node", "Pod"])
def test_what_readers_read_survives_and_the_rest_is_gone(make: Any) -> None:
    raw = make()
    before = copy.deepcopy(raw)
    got = compact.compact(raw)
    assert raw == before  # the argument is not modified
    kind = raw["kind"]
    for path in READ[kind]:
        try:
            want = _get(raw, path)
        except KeyError:
            continue
        assert _get(got, path) == want, path
    for path in GONE[kind]:
        with pytest.raises(KeyError):
            _get(got, path)


def test_fitcore_reads_the_same_node_and_pod() -> None:
    node, pod = full_node(), full_pod()
    assert kube.node(compact.compact(node)) == kube.node(node)
    del pod["metadata"]["deletionTimestamp"]
    assert workload.pod_usage(compact.compact(pod)) == workload.pod_usage(pod)
    assert workload.bound_pod(compact.compact(pod)) == workload.bound_pod(pod)


def test_a_realistic_cluster_is_kept_equal_and_read_the_same() -> None:
    objs = rl.cluster(24, rack_size=4)  # every GPU model and NIC layout
    for o in objs:
        got = compact.compact(o)
        assert got == o
        parse = kube.PARSERS.get(o["kind"])
        if parse is not None:
            assert parse(got, None) == parse(o, None)


def test_equal_small_leaves_are_one_object() -> None:
    rng = random.Random(1)
    a, b = (compact.compact(s) for s in rl.node_objects(rng, 0)[1:2] * 2)
    da, db = a["spec"]["devices"][0], b["spec"]["devices"][0]
    assert a is not b and a["metadata"] is not b["metadata"]  # objects stay their own
    assert da["capacity"] is db["capacity"]
    assert da["attributes"]["productName"] is db["attributes"]["productName"]
    # Within one slice, the devices share what they have alike, not what differs.
    d0, d1 = a["spec"]["devices"][:2]
    assert d0["attributes"]["driverVersion"] is d1["attributes"]["driverVersion"]
    assert d0["attributes"]["uuid"] is not d1["attributes"]["uuid"]
    assert d0["attributes"] is not d1["attributes"]


@pytest.mark.parametrize("values", [[1, True, 1.0], [0, False, 0.0], ["1", 1]],
                         ids=["one", "zero", "text"])
def test_values_equal_in_python_but_not_in_json_are_not_shared(values: list[Any]) -> None:
    leaves = compact.Leaves()
    got = [compact.compact({"metadata": {"name": "x"}, "spec": {"v": {"x": v}}}, "X", leaves)
           for v in values]
    for g, v in zip(got, values, strict=True):
        assert type(g["spec"]["v"]["x"]) is type(v)
    assert len({id(g["spec"]["v"]) for g in got}) == len(values)


def test_the_kept_leaves_are_bounded() -> None:
    leaves = compact.Leaves(limit=10)
    for i in range(100):
        compact.compact({"metadata": {"name": f"o{i}"}, "spec": {"u": {"string": f"id-{i}"}}},
                        "X", leaves)
        assert len(leaves) <= 10
