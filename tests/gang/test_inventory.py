"""fitcore.inventory.Inventory: the API the admission service calls."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from fitcore import errors, gang, inventory, plan, workload
from tests.fitcore import builders as b
from tests.gang import builders as gb


def new(*objects: dict[str, Any]) -> inventory.Inventory:
    inv = inventory.Inventory()
    for o in [*gb.classes(), *objects]:
        inv.apply("ADDED", o)
    return inv


def gang_of(count: int = 2, cpu: str = "8", **kw: Any) -> gang.Gang:
    return workload.gang_of(gb.workload(gb.pod_set(count=count, cpu=cpu, templates=("gpus",),
                                                   **kw)),
                            {("default", "gpus"): gb.template(gpus=4)})


def pod(name: str, node: str, cpu: str, phase: str = "Running") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "x"},
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase}}


def test_fit_follows_claims_and_pods_as_they_come_and_go() -> None:
    inv = new(*gb.gpu_node("n1", cpu="16"))
    g = gang_of(2)
    assert inv.fit(g).verdict == "fits"
    busy = gb.allocated("busy", "n1", [(b.GPU, "gpu-0")])
    inv.apply("ADDED", busy)
    assert inv.fit(g).verdict == "unsatisfiable"  # one root has 3 GPUs free now
    inv.apply("DELETED", busy)
    assert inv.fit(g).verdict == "fits"
    inv.apply("ADDED", pod("p", "n1", "4"))  # bound: 12 cpu left, one pod of 8 fits
    result = inv.fit(g)
    assert result.verdict == "unsatisfiable"
    assert any("not enough cpu" in r for r in result.reasons), result.reasons
    inv.apply("MODIFIED", pod("p", "n1", "4", phase="Succeeded"))  # finished: freed
    assert inv.fit(g).verdict == "fits"
    unallocated = copy.deepcopy(busy)
    del unallocated["status"]
    inv.apply("ADDED", busy)
    inv.apply("MODIFIED", unallocated)  # the claim's allocation released
    assert inv.fit(g).verdict == "fits"


def test_nodes_and_slices_come_and_go() -> None:
    inv = new()
    g = gang_of(2)
    assert inv.fit(g).verdict == "unsatisfiable"
    objects = gb.gpu_node("n1", cpu="16")
    for o in objects:
        inv.apply("ADDED", o)
    assert inv.fit(g).verdict == "fits"
    assert [n.name for n in inv.nodes()] == ["n1"]
    gpu_slice = objects[1]
    inv.apply("DELETED", gpu_slice)
    assert inv.fit(g).verdict == "unsatisfiable"
    inv.apply("ADDED", gpu_slice)
    inv.apply("DELETED", objects[0])
    assert inv.nodes() == [] and inv.fit(g).verdict == "unsatisfiable"
    assert inv.stats()["nodes"] == 0 and inv.stats()["devices"] == 10


def test_device_class_change_is_seen() -> None:
    inv = new(*gb.gpu_node("n1", cpu="16"))
    g = gang_of(1)
    assert inv.fit(g).verdict == "fits"
    inv.apply("MODIFIED", {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                           "metadata": {"name": "gpu"}, "spec": {"selectors": [
                               {"cel": {"expression": 'device.driver == "other.example.com"'}}]}})
    assert inv.fit(g).verdict == "unsatisfiable"


def test_a_bad_object_changes_nothing() -> None:
    inv = new(*gb.gpu_node("n1", cpu="16"))
    g = gang_of(2)
    bad = gb.node("n1", cpu="lots")
    with pytest.raises(errors.InputError) as caught:
        inv.apply("MODIFIED", bad)
    assert "Node n1" in str(caught.value) and "status.allocatable['cpu']" in str(caught.value)
    assert inv.nodes()[0].allocatable["cpu"].value == 16  # the previous version stays
    assert inv.fit(g).verdict == "fits"
    bad_slice = gb.gpu_node("n1")[1]
    bad_slice["spec"]["devices"][0]["name"] = "Not A Name"
    with pytest.raises(errors.InputError, match=r"ResourceSlice n1-gpu: spec.devices\[0\].name"):
        inv.apply("MODIFIED", bad_slice)
    assert inv.fit(g).verdict == "fits"


def test_unrelated_kinds_and_events_are_refused() -> None:
    inv = new()
    with pytest.raises(errors.InputError, match="unsupported kind 'ConfigMap'"):
        inv.apply("ADDED", {"kind": "ConfigMap", "metadata": {"name": "x"}})
    with pytest.raises(errors.InputError, match="unknown event 'BOOKMARK'"):
        inv.apply("BOOKMARK", gb.node("n1"))  # type: ignore[arg-type]
    assert inv.nodes() == []


def test_deleting_an_unknown_object_is_a_no_op() -> None:
    inv = new(*gb.gpu_node("n1", cpu="16"))
    before = inv.stats()
    for o in (gb.node("other"), gb.allocated("nobody", "n1", [(b.GPU, "gpu-0")]),
              pod("p", "n1", "1"), gb.shape("none")):
        inv.apply("DELETED", o)
    assert inv.stats() == before


def test_plan_with_all_named_or_unknown_shapes() -> None:
    inv = new(*gb.gpu_node("n1", cpu="16", rack="r1"), gb.shape("rail", price=12),
              gb.shape("basic", price=9, nics=["pci9"]))
    assert [s.name for s in inv.shapes()] == ["basic", "rail"]
    g = gang_of(6, topology=gb.RACK)
    result = inv.plan(g)
    assert result.verdict == "needs-capacity"
    assert result.plan is not None and result.plan.shapes[0].shape == "rail"
    assert dict(result.rejected).keys() == {"basic"}
    only = inv.plan(g, shapes=["basic", "missing"])
    assert only.verdict == "unsatisfiable"
    assert dict(only.rejected)["missing"] == "no NodeShape of this name"
    assert inv.fit(g).verdict == "unsatisfiable"  # fit never adds nodes


def test_node_filter_keeps_nodes_out_and_says_so() -> None:
    inv = new(*gb.gpu_node("n1", cpu="16"), *gb.gpu_node("n2", cpu="16"))
    g = gang_of(2)
    allowed = inv.fit(g, node_filter=lambda n: n.name != "n1")
    assert allowed.verdict == "fits" and {p.node for p in allowed.placements} == {"n2"}
    none = inv.fit(gang_of(4), node_filter=lambda n: n.name != "n1")
    assert none.verdict == "unsatisfiable"
    assert any("1 node is not allowed for this workload by policy (n1)" in r
               for r in none.reasons), none.reasons


def test_plan_survives_json_and_verifies_after_provisioning() -> None:
    inv = new(*gb.gpu_node("n1", cpu="16", rack="r1"), gb.shape("rail", price=12))
    g = gang_of(6, topology=gb.RACK)
    planned = inv.plan(g)
    assert planned.plan is not None
    stored = json.loads(json.dumps(planned.plan.to_json()))
    restored = plan.Plan.from_json(stored)
    assert restored.to_json() == planned.plan.to_json()
    assert restored.shapes == planned.plan.shapes and restored.price == planned.plan.price
    assert restored.existing_nodes == planned.plan.existing_nodes
    assert [p.devices for p in restored.placements] == \
        [p.devices for p in planned.plan.placements]
    # The autoscaler brings the nodes, and their drivers publish what the shape promised.
    shape = gb.shape("rail", price=12)
    for i in range(restored.nodes):
        name = f"real-{i}"
        objects = gb.gpu_node(name, rack="new-rack", cpu="64")
        objects[0]["metadata"]["labels"].update(shape["spec"]["nodeLabels"])
        for o in objects:
            inv.apply("ADDED", o)
    verified = inv.verify(g, restored)
    assert verified.verdict == "fits", (verified.reasons, verified.mismatches)
    assert {p.node for p in verified.placements} <= {f"real-{i}" for i in range(3)}


def test_plan_from_bad_json_is_an_input_error() -> None:
    with pytest.raises(errors.InputError, match=r"not a plan written by Plan\.to_json"):
        plan.Plan.from_json({"shapes": [{"count": 1}]})


def test_a_change_on_one_node_recomputes_that_node_only() -> None:
    objects: list[dict[str, Any]] = []
    for i in range(30):
        objects += gb.gpu_node(f"n{i:02d}", cpu="16")
    inv = new(*objects)
    g = gang_of(70)
    first = inv.fit(g)
    assert first.verdict == "unsatisfiable"  # 30 nodes hold 60 pods
    again = inv.fit(g)
    assert again.stats.allocations == 0  # everything kept
    inv.apply("ADDED", gb.allocated("busy", "n07", [(b.GPU, "gpu-1")]))
    after = inv.fit(g)
    assert after.stats.allocations <= 2  # the changed node's new class only
    assert inv.stats()["kept entries"] <= 3


def test_stats_name_sizes() -> None:
    inv = new(*gb.gpu_node("n1"))
    inv.fit(gang_of(1))
    stats = inv.stats()
    for key in ("nodes", "devices", "kept problems", "kept entries", "selector results",
                "gangs kept", "fills kept"):
        assert isinstance(stats[key], int), key
    assert stats["nodes"] == 1 and stats["devices"] == 10 and stats["gangs kept"] == 1


def test_gang_of_reads_workloads_and_jobs_and_refuses_other_kinds() -> None:
    templates = {("default", "gpus"): gb.template(gpus=4)}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "j", "namespace": "default"},
           "spec": {"parallelism": 3, "template": {"spec": {
               "containers": [{"name": "c"}],
               "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]}}}}
    g = workload.gang_of(job, templates)
    assert g.kind == "Job" and g.pod_sets[0].count == 3
    with pytest.raises(errors.InputError, match="ResourceClaimTemplate default/gpus not found"):
        workload.gang_of(job, {})
    with pytest.raises(errors.InputError, match="expected Workload or Job"):
        workload.gang_of({"kind": "Pod", "metadata": {"name": "p"}}, templates)
