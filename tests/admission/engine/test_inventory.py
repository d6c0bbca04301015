"""ClusterInventory: decisions over the watch stores, kept current incrementally, with bad
objects reported and skipped."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from admission.engine import inventory
from admission.kube import client, kinds, store
from fitcore import gang, workload
from tests.fitcore import builders as b
from tests.gang import builders as gb

KINDS = {o.kind: o for o in kinds.ALL}


class Stores:
    def __init__(self) -> None:
        self.by_kind: dict[str, store.Store] = {}

    def __call__(self, kind: kinds.Kind) -> store.Store:
        return self.by_kind.setdefault(kind.kind, store.Store(kind))

    def put(self, *objs: dict[str, Any]) -> None:
        for o in objs:
            self(KINDS[o["kind"]]).seed(o)

    def delete(self, kind: kinds.Kind, name: str, namespace: str | None = None) -> None:
        s = self(kind)
        obj = s.get(name, namespace)
        assert obj is not None
        s.apply(client.WatchEvent("DELETED", obj))


def _rv(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for i, o in enumerate(objs):
        o.setdefault("metadata", {})["resourceVersion"] = str(i + 1)
    return objs


def _gang(inv: inventory.ClusterInventory, count: int) -> gang.Gang:
    wl = gb.workload(gb.pod_set(count=count, templates=("gpus",)))
    return workload.workload(wl, inv.references())


def _cluster(nodes: int = 2, background: bool = False
             ) -> tuple[Stores, inventory.ClusterInventory]:
    stores = Stores()
    objs: list[dict[str, Any]] = [*gb.classes(), gb.template()]
    for i in range(nodes):
        objs += gb.gpu_node(f"n{i}")
    stores.put(*_rv(objs))
    return stores, inventory.ClusterInventory(stores, background=background)


def test_fit_plan_and_problems_over_the_stores() -> None:
    stores, inv = _cluster(2)
    assert inv.nodes() == 2
    assert inv.fit(_gang(inv, 4)).verdict == "fits"  # 2 nodes × 2 roots
    assert inv.fit(_gang(inv, 5)).verdict == "unsatisfiable"
    assert inv.plan(_gang(inv, 5)).verdict == "unsatisfiable"  # no shapes yet
    stores.put(gb.shape("rail", price=12))
    planned = inv.plan(_gang(inv, 5))
    assert planned.verdict == "needs-capacity"
    assert planned.plan is not None
    assert [(s.shape, s.count) for s in planned.plan.shapes] == [("rail", 1)]
    assert inv.plan(_gang(inv, 5), shapes=[]).verdict == "unsatisfiable"
    assert inv.plan(_gang(inv, 5), shapes=["other"]).verdict == "unsatisfiable"
    assert inv.problems() == {}


def test_events_keep_it_current_without_relisting() -> None:
    stores, inv = _cluster(1)
    g = _gang(inv, 3)
    assert inv.fit(g).verdict == "unsatisfiable"
    stores.put(*gb.gpu_node("n9"))
    assert inv.fit(g).verdict == "fits"
    # Devices of n9 get allocated: the gang no longer fits.
    claim = gb.allocated("held", "n9", [(b.GPU, f"gpu-{i}") for i in range(8)])
    claim["metadata"]["namespace"] = "other"
    stores.put(claim)
    assert inv.fit(g).verdict == "unsatisfiable"
    stores.delete(kinds.RESOURCE_CLAIM, "held", "other")
    assert inv.fit(g).verdict == "fits"
    stores.delete(kinds.NODE, "n9")
    assert inv.fit(g).verdict == "unsatisfiable"


def test_bound_pods_count_against_their_node_and_finish() -> None:
    stores, inv = _cluster(1)
    g = _gang(inv, 1)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "hog", "namespace": "x", "resourceVersion": "1"},
           "spec": {"nodeName": "n0", "containers": [
               {"name": "c", "resources": {"requests": {"cpu": "60"}}}]},
           "status": {"phase": "Running"}}
    stores.put(pod)
    assert inv.fit(g).verdict == "unsatisfiable"  # 4 cpu left, the pod asks 8
    done = copy.deepcopy(pod)
    done["status"]["phase"] = "Succeeded"
    done["metadata"]["resourceVersion"] = "2"
    stores.put(done)
    assert inv.fit(g).verdict == "fits"


def test_heartbeats_are_not_queued_and_events_of_one_object_coalesce() -> None:
    stores, inv = _cluster(3)
    inv.sync()
    gen = inv.generation
    heartbeat = copy.deepcopy(stores(kinds.NODE).get("n1"))
    assert heartbeat is not None
    heartbeat["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    heartbeat["metadata"]["resourceVersion"] = "99"
    stores.put(heartbeat)
    assert inv.generation == gen  # a heartbeat changes nothing fitcore reads
    assert inv._queue == {}
    for i in range(3):
        relabeled = copy.deepcopy(heartbeat)
        relabeled["metadata"]["labels"]["zone"] = f"z{i}"
        relabeled["metadata"]["resourceVersion"] = str(100 + i)
        stores.put(relabeled)
    assert inv.generation == gen + 3
    assert list(inv._queue) == [("Node", ("", "n1"))]  # the latest event only
    inv.sync()
    g = _gang(inv, 2)
    zoned = inv.fit(g, node_filter=lambda n: n.labels.get("zone") == "z2")
    assert {p.node for p in zoned.placements} == {"n1"}


def test_a_bad_object_is_reported_and_the_others_keep_serving() -> None:
    stores, inv = _cluster(2)
    bad = gb.gpu_node("broken")
    bad[1]["spec"]["devices"][0]["attributes"] = {"x": {"int": "not-a-number"}}
    stores.put(*bad)
    inv.sync()
    problems = inv.problems()
    assert list(problems) == ["ResourceSlice broken-gpu"]
    assert "spec.devices[0].attributes" in problems["ResourceSlice broken-gpu"]
    assert inv.fit(_gang(inv, 4)).verdict == "fits"
    stores.delete(kinds.RESOURCE_SLICE, "broken-gpu")
    inv.sync()
    assert inv.problems() == {}


def test_node_filter_limits_the_nodes_a_decision_may_use() -> None:
    _stores, inv = _cluster(2)
    only_n0 = lambda n: n.name == "n0"  # noqa: E731
    assert inv.fit(_gang(inv, 4)).verdict == "fits"
    assert inv.fit(_gang(inv, 4), node_filter=only_n0).verdict == "unsatisfiable"
    result = inv.fit(_gang(inv, 2), node_filter=only_n0)
    assert {p.node for p in result.placements} == {"n0"}


def test_verify_on_the_nodes_that_came() -> None:
    stores, inv = _cluster(1)
    stores.put(gb.shape("rail", price=12))
    g = _gang(inv, 4)
    planned = inv.plan(g)
    assert planned.plan is not None and planned.plan.nodes == 1
    assert inv.verify(g, planned.plan).verdict == "misfit"
    new = gb.gpu_node("rail-1", **{"node.example.com/shape": "rail"}, rack="r1")
    stores.put(*new)
    assert inv.verify(g, planned.plan).verdict == "fits"


async def test_async_decisions_run_off_the_loop_and_time_out_as_undecided() -> None:
    stores, inv = _cluster(2, background=True)
    try:
        assert (await inv.fit_async(_gang(inv, 4))).verdict == "fits"
        stores.put(gb.shape("rail", price=12))
        planned = await inv.plan_async(_gang(inv, 5))
        assert planned.verdict == "needs-capacity" and planned.plan is not None
        assert (await inv.verify_async(_gang(inv, 5), planned.plan)).verdict == "misfit"
        # A decision that cannot finish in time (here: an earlier one still holds the
        # decision lock) ends as undecided, with the reason.
        inv.timeout = 0.05
        with inv._lock:
            slow = await inv.plan_async(_gang(inv, 6))
        assert slow.verdict == "undecided"
        assert "longer than 0.05 s" in slow.reasons[0]
        inv.timeout = 30
        # The late decision finishes on its own; the next one waits for it, then answers.
        assert (await inv.fit_async(_gang(inv, 4))).verdict == "fits"
    finally:
        inv.close()


async def test_events_are_applied_in_the_background_as_they_come() -> None:
    stores, inv = _cluster(1, background=True)
    try:
        bad = gb.gpu_node("broken")
        bad[1]["spec"]["devices"][0]["attributes"] = {"x": {"int": "not-a-number"}}
        stores.put(*bad)

        async def reported() -> None:
            while "ResourceSlice broken-gpu" not in inv.problems():
                await asyncio.sleep(0.01)
        await asyncio.wait_for(reported(), 5)  # no decision, no sync: the thread did it
        assert inv._queue == {}
    finally:
        inv.close()
