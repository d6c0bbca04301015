"""Nodes held for other workloads, left out of a gang's kept view, and gang contents
kept apart from the workload's name.

A decision with `held` nodes must be the decision on an inventory that never had those
nodes (verdict, placements, plan, reasons, the held nodes' own reason aside), whatever
the gang's kept view held before, and must never place a pod on a held node."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

import pytest

from fitcore import gang, inventory, plan, workload
from fitcore import reasons as codes
from tests.gang import realistic as rl

NODES = 120  # three racks: H100, A100, A30
TEMPLATES = [rl.template("h100-root"), rl.template("h100-one", gpus=1, nic=False),
             rl.template("a100-root", model="A100", gpus=4), rl.mig_template("a30-slices")]


def _node_of(obj: dict[str, Any]) -> str | None:
    """The node an object of the realistic cluster belongs to (None: cluster-wide)."""
    kind, meta = obj["kind"], obj["metadata"]
    if kind == "Node":
        return str(meta["name"])
    if kind in ("ResourceSlice", "Pod"):
        return str(obj["spec"]["nodeName"])
    if kind == "ResourceClaim":
        return str(meta["name"]).removeprefix("busy-")
    return None


def _inventory(leave_out: Collection[str] = (), busy: float = 1.0) -> inventory.Inventory:
    inv = inventory.Inventory()
    for o in [*rl.cluster(NODES, busy=busy), *rl.shapes()]:
        if _node_of(o) not in leave_out:
            inv.apply("ADDED", o)
    return inv


def _gang(pods: int, template: str, *, name: str = "train", topology: bool = False
          ) -> gang.Gang:
    return workload.gang_of(rl.workload(pods, template_name=template, name=name,
                                        topology=topology), TEMPLATES)


def _nodes(result: plan.PlanResult) -> set[str]:
    placements = result.placements or (result.plan.placements if result.plan else ())
    return {p.node for p in placements}


def _same(got: plan.PlanResult, want: plan.PlanResult, held: Collection[str]) -> None:
    """`got` (with held nodes) is `want` (without those nodes), but for the held nodes'
    own reason and the search statistics."""
    assert not _nodes(got) & set(held)
    extra = [d for d in got.details if d.code == codes.NODE_HELD]
    if got.verdict == "fits":
        assert not extra
    else:
        assert len(extra) == 1 and extra[0].node == min(held)
    kept = tuple(d for d in got.details if d.code != codes.NODE_HELD)
    assert dataclasses.replace(got, stats=want.stats, details=kept,
                               reasons=tuple(d.message for d in kept)) == want


CASES = [
    (8, "h100-root", False),
    (64, "h100-root", False),
    (16, "h100-one", True),
    (4, "a100-root", False),
    (32, "a30-slices", False),
]


@pytest.mark.parametrize(("pods", "template", "topology"), CASES,
                         ids=[f"{n}x{t}{'-rack' if topo else ''}" for n, t, topo in CASES])
def test_held_nodes_are_the_inventory_without_them(pods: int, template: str,
                                                   topology: bool) -> None:
    inv = _inventory()
    g = _gang(pods, template, topology=topology)
    first = inv.plan(g)  # the gang's whole view is kept from here on
    used = sorted(n for n in _nodes(first) if n.startswith("node-"))  # not new nodes
    held_sets = {
        "where it went": used,
        "first of each rack": ["node-00000", "node-00040", "node-00080"],
        "a whole rack": [f"node-{i:05d}" for i in range(0, 40)],
        "every third": [f"node-{i:05d}" for i in range(1, NODES, 3)],
    }
    for why, held in held_sets.items():
        if not held:
            continue
        got = inv.plan(g, held=held)
        _same(got, _inventory(held).plan(g), held)
        again = inv.plan(g, held=held)  # the kept view without them, found again
        _same(again, _inventory(held).plan(g), held)
        assert not _nodes(again) & set(held), why


def test_held_nodes_after_a_change_elsewhere() -> None:
    """The kept view is patched with the changed node, then the held ones left out."""
    inv = _inventory()
    g = _gang(8, "h100-root")
    used = sorted(n for n in _nodes(inv.plan(g)) if n.startswith("node-"))
    assert used
    busy = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "late", "namespace": "running"},
            "spec": {"nodeName": "node-00003", "containers": [{"name": "main", "resources": {
                "requests": {"cpu": "120"}}}]},
            "status": {"phase": "Running"}}
    inv.apply("ADDED", busy)
    got = inv.plan(g, held=used)
    want_inv = _inventory(used)
    want_inv.apply("ADDED", busy)
    _same(got, want_inv.plan(g), used)
    assert "node-00003" not in _nodes(got)  # 120 of its 128 cpus are taken now


def test_held_names_that_are_no_node_change_nothing() -> None:
    inv = _inventory()
    g = _gang(8, "h100-root")
    want = inv.plan(g)
    got = inv.plan(g, held=["no-such-node"])
    assert dataclasses.replace(got, stats=want.stats) == want


def test_gangs_that_differ_by_name_share_kept_work_and_keep_their_names() -> None:
    inv = _inventory()
    one, other = _gang(8, "h100-root", name="job-1"), _gang(8, "h100-root", name="job-2")
    first = inv.plan(one)
    assert inv.stats()["gangs kept"] == 1
    second = inv.plan(other)
    assert inv.stats()["gangs kept"] == 1
    assert second.stats.allocations == 0  # every fill found in the first one's memo
    assert dataclasses.replace(second, stats=first.stats) == first
    # A reason names the workload decided, not the first of its content.
    refused = inv.plan(_gang(8, "h100-root", name="job-3"),
                       held=[f"node-{i:05d}" for i in range(NODES)])
    assert refused.verdict != "fits"
    assert all(d.object == "Workload team/job-3" for d in refused.details if d.object)


def test_gangs_of_one_template_share_device_parts_and_decide_alike() -> None:
    """An 8-pod and a 16-pod gang of one template see devices alike: the second keys
    no node's devices again, and decides as on an inventory that never saw the first."""
    inv = _inventory()
    inv.plan(_gang(8, "h100-root"))
    assert inv.stats()["device parts kept"] == NODES
    for pods in (16, 64):
        got = inv.plan(_gang(pods, "h100-root"))
        assert inv.stats()["device parts kept"] == NODES
        want = _inventory().plan(_gang(pods, "h100-root"))
        assert dataclasses.replace(got, stats=want.stats) == want
    inv.plan(_gang(8, "a30-slices"))  # other claims: their own parts
    assert inv.stats()["device parts kept"] == 2 * NODES


def _claim(name: str, node: str, gpus: range) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "running"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                "deviceClassName": "gpu"}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "r", "driver": rl.GPU, "pool": f"{node}-gpu", "device": f"gpu-{i}"}
                for i in gpus]}}}}


def test_kept_device_parts_follow_allocations_not_pods() -> None:
    """A pod bound to a node keeps its device part; a claim allocated there does not.
    On an idle cluster with one GPU in use on each of the first two nodes, they are one
    class (the first its representative) until the second's GPUs are all taken."""
    g = _gang(64, "h100-one")
    first, node = "node-00000", "node-00001"
    before = [_claim("a", first, range(1)), _claim("b", node, range(1))]
    changes = [_claim("rest", node, range(1, 16)),
               {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "running"},
                "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {
                    "requests": {"cpu": "1"}}}]}, "status": {"phase": "Running"}}]
    inv, fresh = _inventory(busy=0), _inventory(busy=0)
    for o in before:
        inv.apply("ADDED", o)
        fresh.apply("ADDED", o)
    assert {first, node} <= _nodes(inv.plan(g))
    for change in changes:
        inv.apply("ADDED", change)
        fresh.apply("ADDED", change)
        got, want = inv.plan(g), fresh.plan(g)
        assert dataclasses.replace(got, stats=want.stats) == want
    assert node not in _nodes(got)  # every GPU of it is taken now
