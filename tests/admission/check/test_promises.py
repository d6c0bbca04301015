"""Promises survive failover: a fresh reconciler (a new leader) reads back the nodes
promised to a gang another reconciler admitted, and does not double-book them."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from admission import constants as c
from admission.check import promises
from admission.kube import kinds
from tests.admission import world as w


@pytest.fixture
def world() -> Iterator[w.World]:
    out = w.World()
    yield out
    out.inventory.inner.close()


async def test_a_new_leader_does_not_double_book_nodes_promised_before_failover(
        world: w.World) -> None:
    # n1 is the only GPU node and holds one gang of two workers at a time... until the
    # pods bind, the inventory shows its devices free.
    world.seed(*w.base(), *w.node("n1"), w.admitted(), w.admitted(name="other"))
    old_leader = world.reconciler()
    assert await world.reconcile(old_leader) is None
    assert world.entry()["state"] == "Ready"
    # The old leader is gone; a new one starts from the API's state only.
    world.restart()
    new_leader = world.reconciler()
    world.advance(5)
    assert await world.reconcile(new_leader, name="other") == 2  # waits for the binding
    assert world.entry("other")["state"] == "Pending"
    assert world.requests() == []
    assert new_leader.ledger.promised_nodes("someone-else") == {"n1"}
    # Once train's pods have bound, the read-back promise ends like any other.
    uid = world.workload()["metadata"]["uid"]
    for i in range(2):
        world.seed({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"train-{i}", "namespace": "default",
                                 "labels": {c.PLACEMENT_LABEL: uid}},
                    "spec": {"nodeName": "n1", "containers": []}})
    assert new_leader.ledger.promised_nodes("someone-else") == set()


async def test_a_promise_older_than_its_lifetime_is_not_read_back(world: w.World) -> None:
    world.seed(*w.base(), *w.node("n1"), w.admitted(), w.admitted(name="other"))
    assert await world.reconcile(world.reconciler()) is None
    world.advance(601)  # promise_seconds is 600
    world.restart()
    new_leader = world.reconciler()
    await world.reconcile(new_leader, name="other")
    other = world.workload("other")["metadata"]["uid"]
    assert new_leader.ledger.promised_nodes(other) == set()
    assert world.entry("other")["state"] == "Ready"  # judged on the inventory alone


@pytest.mark.parametrize("data", [
    None, "not json", "{}", '[{"node": 3}]', '[{"podSet": "w"}]'],
    ids=["missing", "not-json", "not-a-list", "node-not-a-string", "no-node"])
async def test_placements_that_do_not_read_back_are_skipped_with_the_field_named(
        world: w.World, data: str | None) -> None:
    world.seed(*w.base(), *w.node("n1"), w.admitted(), w.admitted(name="other"))
    assert await world.reconcile(world.reconciler()) is None
    uid = world.workload()["metadata"]["uid"]
    cm = world.api.find(kinds.CONFIG_MAP, c.PLACEMENTS_PREFIX + uid, "default")
    assert cm is not None
    cm["data"] = {} if data is None else {c.PLACEMENTS_KEY: data}
    with pytest.raises(promises.PlacementsError) as info:
        promises.per_node(cm)
    assert f"ConfigMap default/{c.PLACEMENTS_PREFIX}{uid}: data[" in str(info.value)
    world.seed(cm)
    world.restart()
    new_leader = world.reconciler()
    await world.reconcile(new_leader, name="other")  # goes on deciding
    other = world.workload("other")["metadata"]["uid"]
    assert new_leader.ledger.promised_nodes(other) == set()
    assert world.entry("other")["state"] == "Ready"


def test_per_node_counts_pods_per_node() -> None:
    cm = {"metadata": {"name": "x", "namespace": "ns"},
          "data": {c.PLACEMENTS_KEY: json.dumps([
              {"podSet": "w", "index": 0, "node": "a"}, {"podSet": "w", "index": 1,
                                                        "node": "a"},
              {"podSet": "w", "index": 2, "node": "b"}])}}
    assert promises.per_node(cm) == {"a": 2, "b": 1}


async def test_a_promise_this_reconciler_made_and_ended_is_not_read_back(
        world: w.World) -> None:
    # train is admitted and its pods bind (the promise ends), then they finish and are
    # deleted while train is not yet Finished: its placements are not read back to
    # hold n1 again.
    world.seed(*w.base(), *w.node("n1"), w.admitted(), w.admitted(name="other"))
    r = world.reconciler()
    await world.reconcile(r)
    uid = world.workload()["metadata"]["uid"]
    world.seed(*[{"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": f"train-{i}", "namespace": "default",
                               "labels": {c.PLACEMENT_LABEL: uid}},
                  "spec": {"nodeName": "n1", "containers": []}} for i in range(2)])
    other = world.workload("other")["metadata"]["uid"]
    assert r.ledger.promised_nodes(other) == set()
    for i in range(2):
        world.api.remove(kinds.POD, f"train-{i}", "default")  # finished, deleted
    world.advance(5)
    assert await world.reconcile(r, name="other") is None
    assert world.entry("other")["state"] == "Ready"
