"""Reading gangs and NodeShapes: every problem named by file, object and field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fitcore import errors, workload
from tests.gang import builders as gb


def problems(*objects: dict[str, Any]) -> list[str]:
    with pytest.raises(errors.InputError) as info:
        workload.load([(o, "in.yaml") for o in [*gb.classes(), *objects]])
    return [str(e) for e in info.value.errors]


def shape_with(**spec: Any) -> dict[str, Any]:
    out = gb.shape("s")
    out["spec"].update(spec)
    return out


def with_slice_field(key: str, value: Any) -> dict[str, Any]:
    out = gb.shape("s")
    out["spec"]["resourceSlices"][0][key] = value
    return out


CASES = [
    ("shape-negative-price", shape_with(price="-1"),
     "in.yaml: NodeShape s: spec.price: must not be negative"),
    ("shape-price-not-a-number", shape_with(price="cheap"),
     "in.yaml: NodeShape s: spec.price: must be a number, got 'cheap'"),
    ("shape-nodes-per-domain-zero", shape_with(topology={"domainLabel": "r",
                                                         "nodesPerDomain": 0}),
     "in.yaml: NodeShape s: spec.topology.nodesPerDomain: must be at least 1, got 0"),
    ("shape-slice-with-node-name", with_slice_field("nodeName", "n1"),
     "in.yaml: NodeShape s: spec.resourceSlices[0]: a shape's slices must not select nodes"),
    ("shape-bad-allocatable", shape_with(allocatable={"cpu": "lots"}),
     "in.yaml: NodeShape s: spec.allocatable['cpu']"),
    ("shape-max-nodes-negative", shape_with(maxNodes=-2),
     "in.yaml: NodeShape s: spec.maxNodes: must not be negative, got -2"),
    ("workload-duplicate-pod-set", gb.workload(gb.pod_set("a"), gb.pod_set("a")),
     "in.yaml: Workload default/train: spec.podSets[1].name: duplicate pod set name 'a'"),
    ("workload-no-pod-sets", gb.workload(),
     "in.yaml: Workload default/train: spec.podSets: must have at least one pod set"),
    ("workload-both-claim-sources",
     gb.workload({**gb.pod_set(), "template": {"spec": {"containers": [], "resourceClaims": [
         {"name": "x", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}]}}}),
     "spec.podSets[0].template.spec.resourceClaims[0]: exactly one of "
     "resourceClaimTemplateName, resourceClaimName must be set"),
    ("workload-missing-shared-claim", gb.workload(gb.pod_set(shared=("cache",))),
     "spec.podSets[0].template.spec.resourceClaims[0].resourceClaimName: ResourceClaim "
     "default/cache not found"),
    ("workload-bad-toleration",
     gb.workload(gb.pod_set(tolerations=[{"key": "k", "operator": "Matches"}])),
     "spec.podSets[0].template.spec.tolerations[0].operator: unknown operator 'Matches'"),
    ("workload-bad-affinity",
     gb.workload(gb.pod_set(affinity=[{"key": "zone", "operator": "Near"}])),
     "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]."
     "matchExpressions[0].operator: unknown operator 'Near'"),
    ("job-zero-parallelism",
     {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
      "spec": {"parallelism": 0, "template": gb.pod_set()["template"]}},
     "in.yaml: Job j: spec.parallelism: must be at least 1, got 0"),
    ("pod-bad-request",
     {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x"},
      "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {
          "requests": {"memory": "a lot"}}}]}},
     "in.yaml: Pod x/p: spec.containers[0].resources.requests['memory']"),
]


@pytest.mark.parametrize(("obj", "message"), [(o, m) for _, o, m in CASES],
                         ids=[i for i, _, _ in CASES])
def test_problem_names_file_object_field(obj: dict[str, Any], message: str) -> None:
    found = problems(copy.deepcopy(obj))
    assert any(message in p for p in found), found


def test_all_problems_reported_together() -> None:
    found = problems(shape_with(price="-1", maxNodes=-2),
                     gb.workload(gb.pod_set("a"), gb.pod_set("a")))
    assert len(found) == 3, found


def test_pods_count_only_when_bound_and_running() -> None:
    def pod(name: str, node: str | None, phase: str) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {
            "requests": {"cpu": "2"}}}]}
        if node:
            spec["nodeName"] = node
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": spec, "status": {"phase": phase}}

    bundle = workload.load([(o, None) for o in [
        pod("a", "n1", "Running"), pod("b", "n1", "Pending"), pod("c", "n1", "Succeeded"),
        pod("d", None, "Pending"), pod("e", "n2", "Failed")]])
    assert {k: {r: str(q) for r, q in v.items()} for k, v in bundle.used.items()} == {
        "n1": {"cpu": "4", "pods": "2"}}


def test_init_containers_take_the_larger_request() -> None:
    wl = gb.workload(gb.pod_set(cpu="2"))
    spec = wl["spec"]["podSets"][0]["template"]["spec"]
    spec["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "6",
                                                                       "memory": "1Gi"}}}]
    (g,) = workload.load([(wl, None)]).gangs
    assert {k: str(v) for k, v in g.pod_sets[0].requests.items()} == {"cpu": "6",
                                                                      "memory": "1Gi"}
