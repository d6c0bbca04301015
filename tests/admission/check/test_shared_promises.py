"""Nodes promised to an admitted gang, shared by gangs whose devices cannot collide.

Between Ready and its pods binding, an admitted gang's pods and devices are counted as in
use (`ledger.promise` → `Inventory.assume`). A gang whose devices do not depend on the
order the scheduler takes them in (one device class, exact counts, no constraint) shares
a promised node with gangs of the same kind; any other gang waits for the node as a whole
(`fitcore.kinds_compatible`). The count ends node by node once the promise's pods have
bound there and their claims are allocated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from admission import constants as c
from admission.kube import kinds
from tests.admission import world as w
from tests.fitcore import builders as b
from tests.gang import builders as gb


def one_gpu() -> dict[str, Any]:
    """A claim template of one GPU, no constraint: any free GPU will do."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": "default"},
            "spec": {"spec": b.claim("one-gpu", b.req("gpus", count=1))["spec"]}}


def gang(name: str, pods: int) -> dict[str, Any]:
    return w.admitted(gb.pod_set("workers", pods, templates=("one-gpu",)), name=name)


@pytest.fixture
def world() -> Iterator[w.World]:
    out = w.World()
    yield out
    out.inventory.inner.close()


def _bound(world: w.World, uid: str, i: int, claim: str) -> dict[str, Any]:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"train-{i}", "namespace": "default",
                        "labels": {c.PLACEMENT_LABEL: uid}},
           "spec": {"nodeName": "n1", "containers": []},
           "status": {"resourceClaimStatuses": [{"name": "one-gpu",
                                                 "resourceClaimName": claim}]}}
    world.seed(pod)
    return pod


async def test_gangs_of_one_kind_share_a_promised_node_up_to_its_devices(
        world: w.World) -> None:
    # n1: 8 GPUs, the only GPU node. train takes 3, other 4 while train's pods have not
    # bound: both Ready on n1, nothing bought. third (2 more) finds 1 left: no wait for
    # n1 (its promised devices will be in use), and no second promise of the same GPUs.
    world.seed(*w.base(), one_gpu(), *w.node("n1"), gang("train", 3), gang("other", 4),
               gang("third", 2))
    r = world.reconciler()
    assert await world.reconcile(r) is None
    assert await world.reconcile(r, name="other") is None
    assert world.entry("other")["state"] == "Ready", world.entry("other")
    assert "(n1)" in world.entry("other")["message"]
    uid = {n: world.workload(n)["metadata"]["uid"] for n in ("train", "other", "third")}
    assert world.inventory.inner.assumed() == {uid["train"]: {"n1"}, uid["other"]: {"n1"}}
    await world.reconcile(r, name="third")
    assert world.entry("third")["state"] != "Ready", world.entry("third")
    assert world.requests() == []


async def test_a_gang_of_another_kind_waits_for_the_promised_node_as_a_whole(
        world: w.World) -> None:
    # `big` asks for 4 GPUs and a NIC on one PCIe root: which GPUs the scheduler gives
    # train's pods first decides whether a root stays whole, so n1 is not shared with it.
    world.seed(*w.base(), one_gpu(), *w.node("n1"), gang("train", 1),
               w.admitted(w.workers(1), name="big"))
    r = world.reconciler()
    assert await world.reconcile(r) is None
    assert await world.reconcile(r, name="big") == 2  # waits for train's pod to bind
    assert world.entry("big")["state"] == "Pending"


async def test_the_count_ends_per_node_once_pods_bound_and_claims_allocated(
        world: w.World) -> None:
    world.seed(*w.base(), one_gpu(), *w.node("n1"), gang("train", 2))
    r = world.reconciler()
    assert await world.reconcile(r) is None
    uid = world.workload()["metadata"]["uid"]
    assert world.inventory.inner.assumed() == {uid: {"n1"}}
    for i in range(2):
        _bound(world, uid, i, f"claim-{i}")
    # Bound, but the claims' allocations have not come: still counted (else the devices
    # would look free to the next decision for a moment).
    assert r.ledger.promised_nodes("someone-else") == set()
    assert world.inventory.inner.assumed() == {uid: {"n1"}}
    for i in range(2):
        world.seed({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": f"claim-{i}", "namespace": "default"},
                    "spec": {"devices": {"requests": []}},
                    "status": {"allocation": {"devices": {"results": [
                        {"request": "gpus", "driver": b.GPU, "pool": "n1-gpu",
                         "device": f"gpu-{i}"}]}}}})
    assert r.ledger.promised_nodes("someone-else") == set()
    assert world.inventory.inner.assumed() == {}


@pytest.mark.parametrize("ended", ["Succeeded", "Failed", "deleting"])
async def test_a_pod_that_ended_before_its_claims_were_seen_ends_the_count(
        world: w.World, ended: str) -> None:
    # A short pod: bound, ran and finished before the ledger looked; its claims were
    # deallocated and deleted meanwhile. Nothing of it is left to allocate: the count
    # and the promise end (else n1 stays counted and, once the pod is deleted, held).
    world.seed(*w.base(), one_gpu(), *w.node("n1"), gang("train", 1))
    r = world.reconciler()
    assert await world.reconcile(r) is None
    uid = world.workload()["metadata"]["uid"]
    pod = _bound(world, uid, 0, "claim-gone")
    if ended == "deleting":
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    else:
        pod["status"]["phase"] = ended
    world.seed(pod)
    assert r.ledger.promised_nodes("someone-else") == set()
    assert world.inventory.inner.assumed() == {}


async def test_pods_deleted_after_binding_end_the_count_too(world: w.World) -> None:
    # The pod bound while its claim's allocation had not come: the promise ends (the node
    # is no longer held) but the pod is still counted. The pod and its claim are then
    # deleted before the allocation was ever seen: nothing is left to count.
    world.seed(*w.base(), one_gpu(), *w.node("n1"), gang("train", 1))
    r = world.reconciler()
    assert await world.reconcile(r) is None
    uid = world.workload()["metadata"]["uid"]
    _bound(world, uid, 0, "claim-0")
    assert r.ledger.promised_nodes("someone-else") == set()
    assert world.inventory.inner.assumed() == {uid: {"n1"}}
    world.api.remove(kinds.POD, "train-0", "default")
    world.refresh()
    assert r.ledger.promised_nodes("someone-else") == set()
    assert world.inventory.inner.assumed() == {}
