"""Nodes and ResourceSlices parsed once for two inventories (`kube.Parsed`).

The service's live engine and the gate's idle engine (no claims, no pods) are fed the
same store objects; with one `Parsed` they hold the same model objects. Their decisions
must be those of inventories that parsed everything themselves (verdict, placements,
plan, reasons; the search statistics aside), through changes and deletions."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from fitcore import gang, inventory, kube, plan, workload
from tests.gang import realistic as rl

NODES = 60
TEMPLATES = [rl.template("h100-root"), rl.template("h100-one", gpus=1, nic=False),
             rl.mig_template("a30-slices")]
IDLE = ("Node", "ResourceSlice", "DeviceClass", "NodeShape")


def _gang(pods: int, template: str) -> gang.Gang:
    return workload.gang_of(rl.workload(pods, template_name=template), TEMPLATES)


def _fed(objects: list[dict[str, Any]], parsed: kube.Parsed | None, *, idle: bool
         ) -> inventory.Inventory:
    inv = inventory.Inventory(parsed=parsed)
    for o in objects:
        if not idle or o["kind"] in IDLE:
            inv.apply("ADDED", o)
    return inv


def _same(got: plan.PlanResult, want: plan.PlanResult) -> None:
    assert dataclasses.replace(got, stats=want.stats) == want


def _decisions(inv: inventory.Inventory) -> list[plan.PlanResult]:
    return [inv.plan(_gang(pods, t)) for t in ("h100-root", "h100-one", "a30-slices")
            for pods in (1, 4, 16)]


def test_two_inventories_share_parsed_objects_and_decide_as_alone() -> None:
    objects = [*rl.cluster(NODES), *rl.shapes()]
    parsed = kube.Parsed()
    live = _fed(objects, parsed, idle=False)
    idle = _fed(objects, parsed, idle=True)
    shared = sum(1 for o in objects if o["kind"] in kube.Parsed.KINDS)
    assert parsed.parses == shared and parsed.hits == shared and len(parsed) == shared
    assert all(a is b for a, b in zip(live.nodes(), idle.nodes(), strict=True))
    for got, want in zip(_decisions(live), _decisions(_fed(objects, None, idle=False)),
                         strict=True):
        _same(got, want)
    for got, want in zip(_decisions(idle), _decisions(_fed(objects, None, idle=True)),
                         strict=True):
        _same(got, want)


def test_a_changed_object_is_parsed_again_and_a_deleted_one_forgotten() -> None:
    objects = rl.cluster(NODES)
    parsed = kube.Parsed()
    live, idle = _fed(objects, parsed, idle=False), _fed(objects, parsed, idle=True)
    node = next(o for o in objects if o["kind"] == "Node")
    name = node["metadata"]["name"]
    tainted = copy.deepcopy(node)
    tainted.setdefault("spec", {})["taints"] = [{"key": "x", "effect": "NoSchedule"}]
    before = parsed.parses
    live.apply("MODIFIED", tainted)
    idle.apply("MODIFIED", copy.deepcopy(tainted))  # equal, not the same object: a hit
    assert parsed.parses == before + 1
    got = {n.name: n for n in idle.nodes()}[name]
    assert got is {n.name: n for n in live.nodes()}[name] and got.taints
    # A different object of the same name is the idle engine's own (parsed, not taken).
    idle.apply("MODIFIED", node)
    assert not {n.name: n for n in idle.nodes()}[name].taints
    assert {n.name: n for n in live.nodes()}[name].taints
    live.apply("DELETED", node)
    assert name not in {n.name for n in live.nodes()}
    assert parsed.get("Node", node, False) is None
    fresh = [o for o in objects if o is not node]
    for got_, want in zip(_decisions(live), _decisions(_fed(fresh, None, idle=False)),
                          strict=True):
        _same(got_, want)


def test_views_past_the_bound_are_evicted_and_decisions_stay_fresh() -> None:
    objects = [*rl.cluster(NODES), *rl.shapes()]
    bounded = inventory.Inventory(views=1)
    for o in objects:
        bounded.apply("ADDED", o)
    asked = [(t, pods) for _ in range(2) for t in ("h100-root", "a30-slices", "h100-one")
             for pods in (2, 8)]
    for t, pods in asked:
        g = _gang(pods, t)
        _same(bounded.plan(g), _fed(objects, None, idle=False).plan(g))
        assert bounded.stats()["views kept"] == 1
    stats = bounded.stats()
    assert stats["views evicted"] >= 5  # every change of template evicted the other's
    assert stats["gangs kept"] <= 2  # only the contents of the one view kept


def test_a_change_after_eviction_is_seen() -> None:
    objects = rl.cluster(NODES)
    bounded = inventory.Inventory(views=1)
    for o in objects:
        bounded.apply("ADDED", o)
    bounded.plan(_gang(4, "h100-root"))
    bounded.plan(_gang(4, "h100-one"))  # evicts the h100-root view
    node = next(o for o in objects if o["kind"] == "Node")
    cordoned = copy.deepcopy(node)
    cordoned.setdefault("spec", {})["unschedulable"] = True
    bounded.apply("MODIFIED", cordoned)
    after = [cordoned if o is node else o for o in objects]
    for t in ("h100-root", "h100-one"):
        g = _gang(NODES // 3, t)
        _same(bounded.plan(g), _fed(after, None, idle=False).plan(g))
