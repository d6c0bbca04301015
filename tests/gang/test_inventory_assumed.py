"""Promised placements counted as in use (`Inventory.assume`, `fitcore.assumed`).

A decision after `assume` must be the decision on an inventory that holds the promised
pods and their allocated claims as real objects; `forget` must leave nothing behind; and
`kind_of` must call a gang simple only when its pods' devices do not depend on the order
the scheduler takes them in."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fitcore import assumed, gang, inventory, plan, workload
from tests.gang import realistic as rl

NODES = 120  # three racks: H100, A100, A30


def _simple_template(name: str = "one-gpu", gpus: int = 1) -> dict[str, Any]:
    """`gpus` H100s, no constraint: any free ones will do."""
    t = rl.template(name, gpus=gpus, nic=False)
    del t["spec"]["spec"]["devices"]["constraints"]
    return t


TEMPLATES = [_simple_template(), _simple_template("two-gpus", 2), rl.template("h100-root"),
             rl.mig_template("a30-slices")]


def _inventory(extra: list[dict[str, Any]] = ()) -> inventory.Inventory:  # type: ignore[assignment]
    inv = inventory.Inventory()
    for o in [*rl.cluster(NODES, busy=0.5), *extra]:
        inv.apply("ADDED", o)
    return inv


def _gang(pods: int, template: str, name: str) -> gang.Gang:
    return workload.gang_of(rl.workload(pods, template_name=template, name=name), TEMPLATES)


def _real(owner: str, g: gang.Gang, placements: tuple[gang.Placement, ...]
          ) -> list[dict[str, Any]]:
    """The promised pods and claims as the API server would hold them once bound."""
    out: list[dict[str, Any]] = []
    for i, pod in enumerate(assumed.pods(g, placements)):
        name = f"{owner}-{i}"
        requests = {k: str(q) for k, q in pod.requests.items() if k != "pods"}
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": "team"},
                    "spec": {"nodeName": pod.node, "containers": [
                        {"name": "main", "resources": {"requests": requests}}]},
                    "status": {"phase": "Running"}})
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": name, "namespace": "team"},
                    "spec": {"devices": {"requests": []}},
                    "status": {"allocation": {"devices": {"results": [
                        {"request": "gpus", "driver": d.id.driver, "pool": d.id.pool,
                         "device": d.id.device} for d in pod.devices]}}}})
    return out


def _placed(result: plan.PlanResult) -> tuple[gang.Placement, ...]:
    assert result.verdict == "fits", result.reasons
    return tuple(result.placements)


def _without_stats(result: plan.PlanResult) -> plan.PlanResult:
    return dataclasses.replace(result, stats=None)


CASES = [(6, "one-gpu", 9, "one-gpu"), (12, "two-gpus", 5, "one-gpu"),
         (3, "h100-root", 20, "one-gpu"), (10, "one-gpu", 2, "h100-root"),
         (8, "a30-slices", 8, "a30-slices")]


@pytest.mark.parametrize(("a_pods", "a_template", "b_pods", "b_template"), CASES)
def test_a_decision_after_assume_is_the_one_with_the_real_pods(
        a_pods: int, a_template: str, b_pods: int, b_template: str) -> None:
    inv = _inventory()
    a = _gang(a_pods, a_template, "a")
    placements = _placed(inv.plan(a))
    inv.assume("uid-a", a, placements)
    b = _gang(b_pods, b_template, "b")
    got = inv.plan(b)
    want = _inventory(_real("a", a, placements)).plan(b)
    assert _without_stats(got) == _without_stats(want)
    assert inv.assumed_nodes() == {"uid-a": frozenset(p.node for p in placements)}


def test_forget_leaves_nothing_behind_per_node_and_in_all() -> None:
    inv = _inventory()
    fresh = _inventory()
    a = _gang(16, "two-gpus", "a")
    placements = _placed(inv.plan(a))
    nodes = sorted({p.node for p in placements})
    assert len(nodes) > 1, nodes
    inv.assume("uid-a", a, placements)
    b = _gang(30, "one-gpu", "b")
    assert _without_stats(inv.plan(b)) != _without_stats(fresh.plan(b))
    inv.forget("uid-a", nodes[:1])
    assert inv.assumed_nodes() == {"uid-a": frozenset(nodes[1:])}
    inv.forget("uid-a")
    assert inv.assumed_nodes() == {}
    assert inv.stats()["pods"] == fresh.stats()["pods"]
    assert inv.stats()["allocated claims"] == fresh.stats()["allocated claims"]
    assert _without_stats(inv.plan(b)) == _without_stats(fresh.plan(b))


def test_assume_again_replaces_the_earlier_promise() -> None:
    inv = _inventory()
    a = _gang(4, "one-gpu", "a")
    first = _placed(inv.plan(a))
    inv.assume("uid-a", a, first)
    second = _placed(inv.plan(a))
    assert {p.node for p in second} or second
    inv.assume("uid-a", a, second)
    want = _inventory(_real("a", a, second))
    b = _gang(7, "one-gpu", "b")
    assert _without_stats(inv.plan(b)) == _without_stats(want.plan(b))


def test_kind_of_calls_only_order_free_gangs_simple() -> None:
    one, two = _gang(2, "one-gpu", "x"), _gang(2, "two-gpus", "y")
    assert isinstance(assumed.kind_of(one), assumed.Simple)
    assert assumed.kind_of(one) == assumed.kind_of(two)  # same class and selectors
    assert assumed.kind_of(_gang(2, "h100-root", "z")) is None  # a constraint
    assert assumed.kind_of(_gang(2, "a30-slices", "w")) is None
    cpu_only = gang.Gang("c", pod_sets=(gang.PodSet("main", 3),))
    assert assumed.kind_of(cpu_only) is assumed.NO_DEVICES
    assert assumed.compatible(assumed.kind_of(one), assumed.kind_of(two))
    assert assumed.compatible(None, assumed.NO_DEVICES)
    assert not assumed.compatible(None, None)
    assert not assumed.compatible(None, assumed.kind_of(one))
    other = dataclasses.replace(assumed.kind_of(one), device_class="nic")  # type: ignore[type-var]
    assert not assumed.compatible(other, assumed.kind_of(one))
