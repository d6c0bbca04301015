"""The one reader of node taints and of quantity maps names every problem by its field."""

from __future__ import annotations

from typing import Any

import pytest

from fitcore import errors, kube, workload
from tests.gang import builders as gb

TAINTS = [{"key": "a", "effect": "Sometimes"}, {"effect": "NoSchedule"}, {"key": "b"}]


def problems(parse: Any, obj: dict[str, Any]) -> list[str]:
    with pytest.raises(errors.InputError) as info:
        parse(obj)
    return [str(e) for e in info.value.errors]


def test_node_and_node_shape_taints_read_alike() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
            "spec": {"taints": TAINTS}}
    shape = gb.shape("s")
    shape["spec"]["taints"] = TAINTS
    expected = ["spec.taints[0].effect: unknown effect 'Sometimes'",
                "spec.taints[1].key: required field is missing",
                "spec.taints[2].effect: required field is missing"]
    assert problems(kube.node, node) == [f"Node n: {e}" for e in expected]
    assert problems(workload.node_shape, shape) == [f"NodeShape s: {e}" for e in expected]


def test_quantity_maps_name_the_entry() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "lots", "memory": "-1Gi"}}}
    got = problems(kube.node, node)
    assert len(got) == 1
    assert got[0].startswith("Node n: status.allocatable['cpu']: invalid quantity 'lots'")
    assert kube.node({**node, "status": {"allocatable": {"memory": "-1Gi"}}}
                     ).allocatable["memory"].value < 0  # as before: not refused on a Node
    shape = gb.shape("s")
    shape["spec"]["allocatable"] = {"memory": "-1Gi"}
    assert problems(workload.node_shape, shape) == [
        "NodeShape s: spec.allocatable['memory']: must not be negative, got '-1Gi'"]
    sl = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
          "metadata": {"name": "s"},
          "spec": {"driver": "gpu.example.com", "nodeName": "n", "pool": {
              "name": "p", "resourceSliceCount": 1},
              "sharedCounters": [{"name": "c", "counters": {"m": {"value": "x"}, "n": "4"}}]}}
    got = problems(kube.resource_slice, sl)
    assert got[0].startswith(
        "ResourceSlice s: spec.sharedCounters[0].counters['m'].value: invalid quantity 'x'")
    assert got[1] == ("ResourceSlice s: spec.sharedCounters[0].counters['n'].value: must be "
                      "a quantity string such as '40Gi', got None")
    assert len(got) == 2
