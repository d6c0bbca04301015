"""A pass over the copy of a Workload that fitgate's own status write replaced, before the
store has caught up with the write (`inputs.OwnWrites`).

Without the guard such a pass decides again on an entry already decided: it rewrites the
placements ConfigMap and moves the gang's promise, and only then fails on the
resourceVersion, so the Workload keeps the pins of the first pass while the ConfigMap
and the promise say where the second one would have put the gang.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from admission import constants as c
from admission.kube import kinds
from tests.admission import world as w

KEY = "default/train"


@pytest.fixture
def world() -> Iterator[w.World]:
    out = w.World()
    yield out
    out.inventory.inner.close()


def placed_on(world: w.World) -> list[str]:
    uid = world.workload()["metadata"]["uid"]
    cm = world.api.find(kinds.CONFIG_MAP, c.PLACEMENTS_PREFIX + uid, "default")
    assert cm is not None
    return [p["node"] for p in json.loads(cm["data"][c.PLACEMENTS_KEY])]


async def ready_not_yet_seen(world: w.World) -> tuple[w.wlr.WorkloadReconciler, int]:
    """One pass that writes Ready; the store still holds the Workload it replaced.
    Returns the reconciler and the number of API calls so far."""
    world.seed(*w.base(), *w.node("n1"), *w.node("n2"), w.admitted())
    r = world.reconciler()
    assert await r.reconcile(KEY) is None
    assert world.entry()["state"] == "Ready"
    stored = world.stores[kinds.WORKLOAD].get("train", "default")
    assert stored is not None and (stored.get("status") or {}).get("admissionChecks", [{}])[0] \
        .get("state") == "Pending", "the store has not seen the write yet"
    return r, len(world.api.calls)


def taint_in_store(world: w.World, node: str) -> None:
    """The node tainted NoSchedule, in the API and the node store only: the Workload
    store keeps its stale copy."""
    obj = world.api.find(kinds.NODE, node)
    assert obj is not None
    obj.setdefault("spec", {})["taints"] = [{"key": "example.com/broken", "effect": "NoSchedule"}]
    world.api.seed(kinds.NODE, obj)
    world.stores[kinds.NODE].replace(world.api.objects(kinds.NODE))


async def test_a_pass_over_the_copy_our_write_replaced_decides_and_writes_nothing(
        world: w.World) -> None:
    r, calls = await ready_not_yet_seen(world)
    assert placed_on(world) == ["n1", "n1"]
    assert world.entry()["podSetUpdates"][0]["nodeSelector"] == {c.HOSTNAME_LABEL: "n1"}
    # n1 changes meanwhile: a second decision would put the gang on n2 (the ConfigMap and
    # the promise) while the Workload keeps the pins of the first.
    taint_in_store(world, "n1")
    decisions = list(world.inventory.calls)
    wait = await r.reconcile(KEY)
    assert placed_on(world) == ["n1", "n1"]
    assert r.ledger.promised_nodes("someone else") == {"n1"}
    assert world.inventory.calls == decisions
    assert len(world.api.calls) == calls
    # The pass is put off: the write's own event queues the Workload again (at the
    # latest, after the grace).
    assert wait == r.own_writes.grace_seconds


async def test_once_the_store_shows_the_write_the_workload_is_reconciled_as_usual(
        world: w.World) -> None:
    r, calls = await ready_not_yet_seen(world)
    world.refresh()
    assert await r.reconcile(KEY) is None  # Ready: nothing to decide
    assert world.entry()["state"] == "Ready"
    assert len(world.api.calls) == calls


async def test_past_the_grace_the_copy_is_read_anyway(world: w.World) -> None:
    # A write that changed nothing on the server brings no event: the Workload is not
    # left waiting for one.
    r, _ = await ready_not_yet_seen(world)
    decisions = len(world.inventory.calls)
    world.advance(r.own_writes.grace_seconds + 1)
    await r.reconcile(KEY)
    assert len(world.inventory.calls) == decisions + 1
