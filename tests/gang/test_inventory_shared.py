"""Gang views shared by projection, and patched with every changed node.

Gang contents that differ only in pod counts class nodes alike (`Projection.key`), so
the inventory keeps one view of the nodes for all of them, and one memo of fills. A
decision on such a shared view, patched with whatever changed since it was last used,
must be the decision of a fresh inventory that holds the same objects (verdict,
placements, plan, reasons; the search statistics aside)."""

from __future__ import annotations

import copy
import dataclasses
import random
from typing import Any

import pytest

from fitcore import gang, inventory, plan, workload
from tests.gang import realistic as rl

NODES = 120  # three racks: H100, A100, A30
TEMPLATES = [rl.template("h100-root"), rl.template("h100-one", gpus=1, nic=False),
             rl.template("a100-root", model="A100", gpus=4), rl.mig_template("a30-slices")]
NAMES = [t["metadata"]["name"] for t in TEMPLATES]
Key = tuple[str, str, str]  # kind, namespace, name


def _gang(pods: int, template: str, *, name: str = "train", topology: bool = False
          ) -> gang.Gang:
    return workload.gang_of(rl.workload(pods, template_name=template, name=name,
                                        topology=topology), TEMPLATES)


def _key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


def _fresh(objects: dict[Key, dict[str, Any]]) -> inventory.Inventory:
    """An inventory that never kept anything, holding these objects."""
    inv = inventory.Inventory()
    for o in objects.values():
        inv.apply("ADDED", o)
    return inv


def _same(got: plan.PlanResult, want: plan.PlanResult) -> None:
    assert dataclasses.replace(got, stats=want.stats) == want


ORDERS = {"small first": [1, 2, 4, 8, 16], "large first": [16, 8, 4, 2, 1]}


@pytest.mark.parametrize("template", NAMES)
@pytest.mark.parametrize("order", list(ORDERS), ids=list(ORDERS))
def test_pod_counts_share_one_view_and_get_the_unshared_decisions(template: str,
                                                                  order: str) -> None:
    objects = {_key(o): o for o in [*rl.cluster(NODES), *rl.shapes()]}
    inv = _fresh(objects)
    for pods in ORDERS[order]:
        g = _gang(pods, template, name=f"job-{pods}")
        _same(inv.plan(g), _fresh(objects).plan(g))
        _same(inv.fit(g), _fresh(objects).fit(g))
    stats = inv.stats()
    assert stats["gangs kept"] == len(ORDERS[order])
    assert stats["views kept"] == 1


def test_a_count_decided_after_a_larger_one_finds_every_fill() -> None:
    objects = {_key(o): o for o in rl.cluster(NODES)}
    inv = _fresh(objects)
    inv.fit(_gang(16, "h100-one"))
    again = inv.fit(_gang(4, "h100-one"))
    assert again.stats.allocations == 0  # the fills of the 16-pod gang hold its 4 pods
    _same(again, _fresh(objects).fit(_gang(4, "h100-one")))


def test_namespaces_share_the_view_not_the_fills() -> None:
    objects = {_key(o): o for o in rl.cluster(NODES)}
    inv = _fresh(objects)
    g = _gang(8, "h100-root")
    other = dataclasses.replace(g, namespace="other")
    inv.fit(g)
    got = inv.fit(other)
    assert inv.stats()["views kept"] == 1
    assert got.stats.allocations > 0
    _same(got, _fresh(objects).fit(other))


class _Events:
    """Random node, pod, slice and claim events on the realistic cluster, kept in
    `objects` as the API server would hold them."""

    def __init__(self, seed: int, objects: dict[Key, dict[str, Any]]) -> None:
        self.rng = random.Random(seed)
        self.objects = objects
        self.nodes = sorted(k[2] for k in objects if k[0] == "Node")
        self.gpu_slices = sorted(k for k in objects if k[0] == "ResourceSlice"
                                 and k[2].endswith("-gpu"))
        self.added: list[Key] = []
        self.serial = 0

    def one(self) -> tuple[str, dict[str, Any]]:
        """One event, applied to `objects`: (event, object)."""
        rng = self.rng
        self.serial += 1
        what = rng.choice(["pod", "pod", "claim", "slice", "node", "gone"])
        if what == "gone" and self.added:
            key = self.added.pop(rng.randrange(len(self.added)))
            return "DELETED", self.objects.pop(key)
        node = rng.choice(self.nodes)
        if what == "node":
            obj = copy.deepcopy(self.objects[("Node", "", node)])
            obj["status"]["allocatable"]["cpu"] = str(rng.choice([96, 112, 128]))
            return self._put("MODIFIED", obj)
        if what == "slice":
            key = rng.choice(self.gpu_slices)
            obj = copy.deepcopy(self.objects[key])
            obj["spec"]["pool"]["generation"] += 1
            if rng.random() < 0.5 and len(obj["spec"].get("devices", ())) > 1:
                obj["spec"]["devices"].pop()  # a GPU gone from the node
            return self._put("MODIFIED", obj)
        if what == "claim":
            key = rng.choice(self.gpu_slices)
            spec = self.objects[key]["spec"]
            devices = spec.get("devices") or [{"name": "gpu-0"}]
            results = [("r", spec["driver"], spec["pool"]["name"], d["name"])
                       for d in rng.sample(devices, min(len(devices), rng.choice([1, 2, 4])))]
            obj = rl._claim(f"extra-{self.serial}", results)
            self.added.append(_key(obj))
            return self._put("ADDED", obj)
        obj = rl._pod(f"extra-{self.serial}", node, rng.choice([8, 32, 64]), 16)
        self.added.append(_key(obj))
        return self._put("ADDED", obj)

    def _put(self, event: str, obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.objects[_key(obj)] = obj
        return event, obj


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_shared_patched_views_are_fresh_views_after_random_events(seed: int) -> None:
    objects = {_key(o): o for o in [*rl.cluster(NODES, seed=seed), *rl.shapes()]}
    inv = _fresh(objects)
    events = _Events(seed, objects)
    rng = random.Random(seed)
    gangs = [_gang(pods, t, name=f"job-{pods}-{t}") for t in NAMES for pods in (1, 4, 16)]
    for g in gangs:
        inv.plan(g)  # every view kept from here on
    # Rounds of few and of many changes (more than an eighth of the nodes: patched, not
    # rebuilt, all the same).
    for changes in (1, 5, 40, 3, 120, 2):
        for _ in range(changes):
            inv.apply(*events.one())  # type: ignore[arg-type]
        for g in rng.sample(gangs, 3):
            _same(inv.plan(g), _fresh(objects).plan(g))
    assert inv.views["patched"] >= 12
    assert not any(k.startswith("rebuilt") and k != "rebuilt: new" for k in inv.views)
    assert inv.stats()["views kept"] == len(NAMES)


def test_a_label_change_rebuilds_the_view() -> None:
    objects = {_key(o): o for o in rl.cluster(NODES)}
    inv = _fresh(objects)
    g = _gang(8, "h100-root")
    inv.fit(g)
    node = copy.deepcopy(objects[("Node", "", "node-00003")])
    node["metadata"]["labels"][rl.RACK] = "rack-elsewhere"
    objects[_key(node)] = node
    inv.apply("MODIFIED", node)
    _same(inv.fit(g), _fresh(objects).fit(g))
    assert inv.views["rebuilt: labels"] == 1


@pytest.mark.parametrize("seed", [1, 2])
def test_bound_pods_stay_in_key_order_as_they_come_and_go(seed: int) -> None:
    """Decisions see the bound pods in (namespace, name) order, kept sorted as they
    change rather than sorted again per decision."""
    objects = {_key(o): o for o in rl.cluster(40, seed=seed)}
    inv = _fresh(objects)
    events = _Events(seed, objects)
    for _ in range(200):
        inv.apply(*events.one())  # type: ignore[arg-type]
        if events.rng.random() < 0.2:
            inv.fit(_gang(2, "h100-one"))
    inv.fit(_gang(2, "h100-one"))
    pods = inv._current().pods
    assert list(pods) == [inv._bound[k] for k in sorted(inv._bound)]
    assert len(pods) > 40
