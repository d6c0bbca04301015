"""The Karpenter backend: NodeClaims for a plan, all or nothing, over the FakeClient.

Shapes with `spec.provisioning.karpenter` are served by NodeClaims instead of a
ProvisioningRequest; the Workload reconciler drives them through
`admission.check.karpenter`. Karpenter itself is played by the test: it sets the
NodeClaims' conditions and `status.nodeName`, adds the Nodes, or deletes a NodeClaim it
cannot launch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

import fitcore
from admission import constants as c
from admission.check import backends, inputs, provisioning
from admission.check import workload as wlr
from admission.check.backends import karpenter as k
from admission.kube import kinds
from tests.admission import crd
from tests.admission import world as w

POOL = "gpu"
INSTANCE_TYPE = "h100-8x"


@pytest.fixture
def world() -> Iterator[w.World]:
    out = w.World()
    yield out
    out.inventory.inner.close()


def karpenter_shape(name: str = "h100", *, pool: str = POOL, price: int = 10,
                    instance_type: str = INSTANCE_TYPE) -> dict[str, Any]:
    s = w.shape(name, price=price)
    s["spec"]["provisioning"] = {"karpenter": {"nodePool": pool, "requirements": [
        {"key": k.INSTANCE_TYPE_LABEL, "operator": "In", "values": [instance_type]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}
    return s


def node_pool(name: str = POOL) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name, "uid": f"uid-{name}"},
            "spec": {"template": {
                "metadata": {"labels": {"team": "ml"}},
                "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh",
                                          "kind": "KWOKNodeClass", "name": "default"},
                         "requirements": [{"key": "kubernetes.io/arch", "operator": "In",
                                           "values": ["amd64"]}],
                         "expireAfter": "720h"}}}}


def claims(world: w.World) -> list[dict[str, Any]]:
    return sorted(world.api.objects(kinds.NODE_CLAIM), key=lambda x: x["metadata"]["name"])


def claim_names(world: w.World) -> list[str]:
    return [x["metadata"]["name"] for x in claims(world)]


def karpenter_launches(world: w.World, name: str, node: str, *, initialized: bool = True,
                       ready: bool = True, gpus: int = 8, roots: int = 2) -> None:
    """Karpenter launches NodeClaim `name` as Node `node` (with its slices published)."""
    claim = world.api.find(kinds.NODE_CLAIM, name)
    assert claim is not None
    conds = [{"type": t, "status": "True", "reason": t,
              "lastTransitionTime": "2026-01-01T00:01:00Z"}
             for t in (k.LAUNCHED, k.REGISTERED) + ((k.INITIALIZED,) if initialized else ())]
    claim["status"] = {"nodeName": node, "conditions": conds}
    world.seed(claim)
    objs = w.node(node, created=w.NEW, shape="h100", ready=ready, gpus=gpus, roots=roots,
                  nics=[f"pci{i}" for i in range(roots)])
    objs[0]["metadata"]["annotations"] = dict(claim["metadata"]["annotations"])
    world.seed(*objs)


def base(*extra: dict[str, Any], count: int = 4) -> list[dict[str, Any]]:
    return [*w.base(), karpenter_shape(), node_pool(), w.admitted(w.workers(count)), *extra]


# ----------------------------------------------------------------- NodeShape field


def test_a_shape_says_karpenter_serves_it() -> None:
    shape = fitcore.node_shape(karpenter_shape())
    assert shape.karpenter is not None
    assert shape.karpenter.node_pool == POOL
    assert [(r.key, r.operator, r.values) for r in shape.karpenter.requirements] == [
        (k.INSTANCE_TYPE_LABEL, "In", (INSTANCE_TYPE,)),
        ("karpenter.sh/capacity-type", "In", ("on-demand",))]
    assert backends.serves(shape) == backends.KARPENTER
    assert backends.serves(fitcore.node_shape(w.shape("h100"))) == \
        backends.PROVISIONING_REQUEST


@pytest.mark.parametrize(("change", "field", "text"), [
    (lambda p: p.update(className="x"), "spec.provisioning.karpenter", "not both"),
    (lambda p: p["karpenter"].pop("nodePool"), "spec.provisioning.karpenter.nodePool",
     "required"),
    (lambda p: p["karpenter"]["requirements"][0].update(operator="Near"),
     "spec.provisioning.karpenter.requirements[0].operator", "unknown operator"),
], ids=["with-class", "no-pool", "bad-operator"])
def test_a_bad_karpenter_field_is_named(change: Any, field: str, text: str) -> None:
    s = karpenter_shape()
    change(s["spec"]["provisioning"])
    with pytest.raises(fitcore.InputError) as exc:
        fitcore.node_shape(s)
    found = [e for e in exc.value.errors if e.path == field]
    assert found and text in found[0].message, exc.value.errors


def test_the_crd_keeps_and_validates_the_karpenter_field() -> None:
    schema = crd.schema(crd.load("nodeshapes.fitgate.io"))
    good = karpenter_shape()
    assert crd.check(schema, good) == []
    assert fitcore.node_shape(crd.defaulted(schema, good)).karpenter == \
        fitcore.node_shape(good).karpenter
    bad = karpenter_shape()
    bad["spec"]["provisioning"]["karpenter"]["requirements"][0]["operator"] = "Near"
    del bad["spec"]["provisioning"]["karpenter"]["nodePool"]
    problems = crd.check(schema, bad)
    assert any("requirements[0].operator" in p for p in problems), problems
    assert any("nodePool" in p for p in problems), problems
    rules = schema["properties"]["spec"]["properties"]["provisioning"][
        "x-kubernetes-validations"]
    assert rules == [{"rule": "!(has(self.className) && has(self.karpenter))",
                      "message": "className and karpenter are exclusive (a shape has one "
                                 "provisioner)"}]


# ---------------------------------------------------------------- NodeClaims


async def test_needs_capacity_creates_one_node_claim_per_planned_node(world: w.World) -> None:
    world.seed(*base())
    assert await world.reconcile() == 60.0
    assert world.requests() == []  # no ProvisioningRequest for a Karpenter shape
    assert claim_names(world) == ["default-train-fitgate-1-0", "default-train-fitgate-1-1"]
    uid = world.workload()["metadata"]["uid"]
    for x in claims(world):
        meta = x["metadata"]
        assert meta["labels"] == {
            "team": "ml", w.SHAPE_LABEL: "h100", c.MANAGED_LABEL: "fitgate",
            c.WORKLOAD_UID_LABEL: uid, c.WORKLOAD_NAME_LABEL: "train",
            c.CHECK_LABEL: "fitgate", c.ATTEMPT_LABEL: "1", k.NODE_POOL_LABEL: POOL}
        assert meta["ownerReferences"] == [{
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": POOL,
            "uid": "uid-gpu", "blockOwnerDeletion": True}]
        assert meta["annotations"][k.DO_NOT_DISRUPT] == "true"
        assert meta["annotations"][c.WORKLOAD_ANNOTATION] == "default/train"
        assert meta["annotations"][k.NODES_ANNOTATION] == "2"
        stored = provisioning.plan_from_json(meta["annotations"][c.PLAN_ANNOTATION])
        assert [(s.shape, s.count) for s in stored.shapes] == [("h100", 2)]
        spec = x["spec"]
        assert spec["nodeClassRef"] == {"group": "karpenter.kwok.sh",
                                        "kind": "KWOKNodeClass", "name": "default"}
        assert spec["requirements"] == [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": k.INSTANCE_TYPE_LABEL, "operator": "In", "values": [INSTANCE_TYPE]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
        assert spec["resources"] == {"requests": {"cpu": "16"}}  # two workers' cpu
        assert spec["expireAfter"] == "720h"
    e = world.entry()
    assert e["state"] == "Pending"
    assert e["message"].startswith(
        "capacity: asked Karpenter for 2 × h100 (NodeClaims default-train-fitgate-1-0, "
        "default-train-fitgate-1-1)")


async def test_a_second_reconciler_creates_no_duplicate(world: w.World) -> None:
    world.seed(*base())
    await world.reconcile()
    await world.reconcile(world.reconciler())
    await world.reconcile(world.reconciler())
    assert claim_names(world) == ["default-train-fitgate-1-0", "default-train-fitgate-1-1"]
    assert len(world.api.verbs("create", kinds.NODE_CLAIM)) == 2


async def test_launching_claims_keep_the_check_pending(world: w.World) -> None:
    world.seed(*base())
    await world.reconcile()
    karpenter_launches(world, "default-train-fitgate-1-0", "kwok-a", initialized=False)
    wait = await world.reconcile()
    assert wait is not None and wait <= 60
    e = world.entry()
    assert e["state"] == "Pending"
    assert "0 of 2 NodeClaims initialized" in e["message"]
    assert "default-train-fitgate-1-1: not launched yet (pending)" in e["message"]
    assert "verify" not in world.inventory.calls


async def test_initialized_and_verified_is_ready_and_keeps_do_not_disrupt(
        world: w.World) -> None:
    world.seed(*base())
    await world.reconcile()
    karpenter_launches(world, "default-train-fitgate-1-0", "kwok-a")
    karpenter_launches(world, "default-train-fitgate-1-1", "kwok-b")
    assert await world.reconcile() is None  # Ready: the Workload's change wakes it again
    e = world.entry()
    assert e["state"] == "Ready", e["message"]
    assert e["message"].startswith(
        "verified on the nodes of NodeClaims default-train-fitgate-1-0, "
        "default-train-fitgate-1-1: 4 pods on 2 nodes (kwok-a, kwok-b)")
    (update,) = e["podSetUpdates"]
    assert c.CONSUME_ANNOTATION not in (update.get("annotations") or {})
    for x in claims(world):
        assert x["metadata"]["labels"][k.ADMITTED_LABEL] == "true"
        assert x["metadata"]["annotations"][k.DO_NOT_DISRUPT] == "true"  # pods not bound
    assert await world.reconcile() == k_bind_poll()  # until the gang's pods are bound
    assert all(k.DO_NOT_DISRUPT in x["metadata"]["annotations"] for x in claims(world))


def k_bind_poll() -> float:
    from admission.check import karpenter as flow
    return flow.BIND_POLL_SECONDS


def bound_pod(world: w.World, name: str, node: str) -> dict[str, Any]:
    uid = world.workload()["metadata"]["uid"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {c.PLACEMENT_LABEL: uid}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}


async def test_do_not_disrupt_is_dropped_once_the_gangs_pods_are_bound(world: w.World) -> None:
    world.seed(*base())
    await world.reconcile()
    karpenter_launches(world, "default-train-fitgate-1-0", "kwok-a")
    karpenter_launches(world, "default-train-fitgate-1-1", "kwok-b")
    await world.reconcile()
    world.seed(*(bound_pod(world, f"p{i}", "kwok-a" if i < 2 else "kwok-b")
                 for i in range(3)))
    assert await world.reconcile() == k_bind_poll()  # 3 of 4 bound
    assert all(k.DO_NOT_DISRUPT in x["metadata"]["annotations"] for x in claims(world))
    world.seed(bound_pod(world, "p3", "kwok-b"))
    assert await world.reconcile() is None
    for x in claims(world):
        assert k.DO_NOT_DISRUPT not in x["metadata"]["annotations"]
        assert c.MANAGED_LABEL not in x["metadata"]["labels"]  # Karpenter's now
    for node in ("kwok-a", "kwok-b"):
        n = world.api.find(kinds.NODE, node)
        assert n is not None and k.DO_NOT_DISRUPT not in n["metadata"]["annotations"]
    assert world.entry()["state"] == "Ready"
    # Finished later: fitgate deletes nothing it handed over.
    world.set_workload(Finished="True")
    await world.reconcile()
    assert len(claims(world)) == 2


async def test_a_claim_karpenter_deleted_fails_the_whole_attempt(world: w.World) -> None:
    world.seed(*base())
    await world.reconcile()
    karpenter_launches(world, "default-train-fitgate-1-0", "kwok-a")
    # Insufficient capacity: Karpenter deletes the NodeClaim it cannot launch.
    world.api.remove(kinds.NODE_CLAIM, "default-train-fitgate-1-1")
    await world.reconcile()
    assert claims(world) == []  # the launched one too: never half a gang
    e = world.entry()
    assert e["state"] == "Retry"
    assert e["message"].startswith(
        "capacity: NodeClaim default-train-fitgate-1-1 is gone (Karpenter deletes a "
        "NodeClaim it cannot launch or that does not register in time); every NodeClaim "
        "of the attempt deleted")


def karpenter_event(claim: str, reason: str = "InsufficientCapacityError",
                    note: str = "insufficient capacity, no h100-8x left in zone a",
                    name: str = "") -> dict[str, Any]:
    """The Warning Event Karpenter publishes on a NodeClaim it could not launch (then it
    deletes the NodeClaim); for a cluster-scoped object it lands in `default`."""
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": name or f"{claim}.{reason.lower()}", "namespace": "default",
                         "creationTimestamp": "2026-01-01T00:00:30Z"},
            "regarding": {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                          "name": claim},
            "type": "Warning", "reason": reason,
            "note": f"NodeClaim {claim} event: {note}"}


def workload_events(world: w.World, reason: str) -> list[dict[str, Any]]:
    return [e for e in world.api.objects(kinds.EVENT)
            if e.get("reason") == reason and e["regarding"].get("kind") == "Workload"]


async def test_capacity_running_out_partway_says_why_and_moves_to_the_next_shape(
        world: w.World) -> None:
    """Karpenter launches 2 of 4 NodeClaims and deletes the other 2 (insufficient
    capacity); fitgate deletes the 2 launched ones too, says why on the check, in a
    Workload Event and on the next plan's NodeClaims, and asks for the next shape."""
    world.seed(*w.base(), karpenter_shape("h100", price=10),
               karpenter_shape("h200", price=20, instance_type="h200-8x"), node_pool(),
               w.admitted(w.workers(8)))  # 2 pods a node: 4 nodes
    await world.reconcile()
    first = claim_names(world)
    assert len(first) == 4
    karpenter_launches(world, first[0], "kwok-a", initialized=False)
    karpenter_launches(world, first[1], "kwok-b", initialized=False)
    for name in first[2:]:
        world.seed(karpenter_event(name))
        world.api.remove(kinds.NODE_CLAIM, name)
    await world.reconcile()
    now = claims(world)
    assert [x["metadata"]["name"] for x in now] == [
        f"default-train-fitgate-1-alt1-{i}" for i in range(4)]  # the launched ones too
    assert {x["metadata"]["labels"][w.SHAPE_LABEL] for x in now} == {"h200"}
    said = ("Karpenter could not launch 2 of the 4 new nodes (NodeClaim "
            "default-train-fitgate-1-2, default-train-fitgate-1-3): insufficient capacity "
            "(InsufficientCapacityError: insufficient capacity, no h100-8x left in zone a); "
            "every NodeClaim of the attempt deleted")
    e = world.entry()
    assert e["state"] == "Pending"
    assert e["message"].startswith(f"capacity: {said}; next plan; asked Karpenter for "
                                   "4 × h200"), e["message"]
    (event,) = workload_events(world, "NodeClaimsFailed")
    assert event["type"] == "Warning" and event["note"] == said
    # The next plan's NodeClaims remember why: the check keeps saying it while they launch.
    assert now[0]["metadata"]["annotations"][k.PREVIOUS_ANNOTATION] == f"{said}; next plan"
    await world.reconcile()
    e = world.entry()
    assert e["message"].startswith("capacity: waiting for Karpenter: 4 × h200"), e["message"]
    assert e["message"].endswith(f"; earlier: {said}; next plan"), e["message"]


async def test_a_claim_karpenter_is_deleting_waits_briefly_for_its_event(
        world: w.World) -> None:
    world.seed(*base())
    await world.reconcile()
    a, b = claim_names(world)
    karpenter_launches(world, a, "kwok-a", initialized=False)
    claim = world.api.find(kinds.NODE_CLAIM, b)
    assert claim is not None
    claim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    world.seed(claim)
    world.now = w.EPOCH.replace(second=2)
    wait = await world.reconcile()
    # No Event yet: the attempt is not failed for 5 s after the deletion began.
    assert wait == pytest.approx(3.0)
    assert len(claims(world)) == 2 and world.api.verbs("delete", kinds.NODE_CLAIM) == []
    world.seed(karpenter_event(b))
    await world.reconcile()
    assert claims(world) == []  # the launched one too
    e = world.entry()
    assert e["state"] == "Retry"
    assert e["message"].startswith(
        f"capacity: Karpenter could not launch 1 of the 2 new nodes (NodeClaim {b}): "
        "insufficient capacity"), e["message"]


async def test_without_karpenters_event_the_message_says_what_the_claims_showed(
        world: w.World) -> None:
    world.seed(*base())
    await world.reconcile()
    a, b = claim_names(world)
    karpenter_launches(world, a, "kwok-a", initialized=False)
    claim = world.api.find(kinds.NODE_CLAIM, b)
    assert claim is not None
    claim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    world.seed(claim)
    world.now = w.EPOCH.replace(second=6)  # waited long enough for an Event
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Retry"
    assert e["message"].startswith(f"capacity: NodeClaim {b} is being deleted; every "
                                   "NodeClaim of the attempt deleted"), e["message"]


@pytest.mark.parametrize(("events", "want"), [
    pytest.param([], {}, id="no-events"),
    pytest.param([karpenter_event("c-1", reason="Launched")], {}, id="not-a-failure"),
    pytest.param([karpenter_event("other")], {}, id="another-claim"),
    pytest.param([karpenter_event("c-1", reason="NodeClassNotReady", note="not ready")],
                 {"c-1": ("NodeClassNotReady", "not ready")}, id="node-class"),
    pytest.param([karpenter_event("c-1", note="old", name="e1"),
                  {**karpenter_event("c-1", note="new", name="e2"),
                   "eventTime": "2026-01-01T00:01:00.000000Z"}],
                 {"c-1": ("InsufficientCapacityError", "new")}, id="newest"),
])
def test_launch_failures_reads_karpenters_events(events: list[dict[str, Any]],
                                                 want: dict[str, tuple[str, str]]) -> None:
    assert k.launch_failures(events, ["c-1"]) == want


async def test_a_claim_missing_from_the_cache_only_is_not_a_failure(world: w.World) -> None:
    world.seed(*base())
    await world.reconcile()
    # The watch has delivered one of the two new NodeClaims so far.
    world.stores[kinds.NODE_CLAIM].replace(world.api.objects(kinds.NODE_CLAIM)[:1])
    await (world.reconciler()).reconcile("default/train")
    assert len(claims(world)) == 2
    assert world.api.verbs("delete", kinds.NODE_CLAIM) == []
    assert world.entry()["state"] == "Pending"


async def test_a_failed_launch_moves_to_the_next_ranked_plan(world: w.World) -> None:
    world.seed(*w.base(), karpenter_shape("h100", price=10),
               karpenter_shape("h200", price=20, instance_type="h200-8x"), node_pool(),
               w.admitted(w.workers(2)))
    await world.reconcile()
    (first,) = claims(world)
    assert first["metadata"]["labels"][w.SHAPE_LABEL] == "h100"
    first["status"] = {"conditions": [{"type": k.LAUNCHED, "status": "False",
                                       "reason": "InsufficientCapacity",
                                       "message": "no h100-8x in zone a"}]}
    world.seed(first)
    await world.reconcile()
    (alt,) = claims(world)
    assert alt["metadata"]["name"] == "default-train-fitgate-1-alt1-0"
    assert alt["metadata"]["labels"][w.SHAPE_LABEL] == "h200"
    assert {"key": k.INSTANCE_TYPE_LABEL, "operator": "In",
            "values": ["h200-8x"]} in alt["spec"]["requirements"]
    e = world.entry()
    assert e["state"] == "Pending"
    assert e["message"].startswith(
        "capacity: NodeClaim default-train-fitgate-1-0 failed to launch "
        "(InsufficientCapacity: no h100-8x in zone a); every NodeClaim of the attempt "
        "deleted; next plan; asked Karpenter for 1 × h200")


async def test_not_initialized_by_the_deadline_deletes_every_claim(world: w.World) -> None:
    world.seed(*base())
    await world.reconcile()
    karpenter_launches(world, "default-train-fitgate-1-0", "kwok-a")
    world.now = w.EPOCH.replace(minute=29)
    wait = await world.reconcile(world.reconciler(request_timeout_seconds=1800))
    assert wait is not None and wait <= 60
    assert len(claims(world)) == 2
    world.now = w.EPOCH.replace(minute=31)
    await world.reconcile(world.reconciler(request_timeout_seconds=1800))
    assert claims(world) == []
    e = world.entry()
    assert e["state"] == "Retry"
    assert "were not all initialized 1800s after their creation" in e["message"]


async def test_a_misfit_deletes_the_claims_and_records_the_shape(world: w.World) -> None:
    world.seed(*base(count=2))
    await world.reconcile()
    (name,) = claim_names(world)
    # The node came with 2 GPUs instead of the 8 its shape promised.
    karpenter_launches(world, name, "kwok-a", gpus=2, roots=1)
    world.now = w.EPOCH.replace(minute=20)
    assert await world.reconcile() is None
    e = world.entry()
    assert e["state"] == "Retry"
    assert e["message"].startswith(
        f"coordination: the nodes of NodeClaims {name} do not keep their shapes' promise")
    assert claims(world) == []
    shape = world.api.find(kinds.NODE_SHAPE, "h100")
    assert shape is not None
    last = shape["status"]["verification"]["lastMismatch"]
    assert last["provisioningRequest"] == f"NodeClaims {name}"
    assert last["nodes"] == ["kwok-a"]
    (event,) = world.api.objects(kinds.EVENT)
    assert event["reason"] == "ProvisionedNodesMisfit"


async def test_another_gangs_new_node_is_not_taken_from_it(world: w.World) -> None:
    world.seed(*base(count=2))
    await world.reconcile()
    (name,) = claim_names(world)
    karpenter_launches(world, name, "kwok-a", initialized=False)
    other = w.admitted(w.workers(2), name="other")
    world.seed(other)
    await world.reconcile(name="other")
    # kwok-a is train's (not admitted yet): other gets NodeClaims of its own.
    assert "default-other-fitgate-1-0" in claim_names(world)
    assert world.entry("other")["state"] == "Pending"


async def test_workload_deleted_deletes_its_claims(world: w.World) -> None:
    world.seed(*base())
    await world.reconcile()
    world.api.remove(kinds.WORKLOAD, "train", "default")
    await world.reconcile()
    assert claims(world) == []


async def test_check_retried_deletes_the_old_attempts_claims(world: w.World) -> None:
    world.seed(*base())
    await world.reconcile()
    world.set_entry(state="Retry", requeueAfterSeconds=60)
    await world.reconcile()
    assert claims(world) == []
    world.set_entry(state="Pending", retryCount=1)
    await world.reconcile()
    assert claim_names(world) == ["default-train-fitgate-2-0", "default-train-fitgate-2-1"]


async def test_a_missing_node_pool_is_a_configuration_retry(world: w.World) -> None:
    world.seed(*w.base(), karpenter_shape(pool="absent"), w.admitted(w.workers(2)))
    await world.reconcile()
    assert claims(world) == []
    e = world.entry()
    assert e["state"] == "Retry"
    assert "NodePool absent (spec.provisioning.karpenter.nodePool) does not exist" in \
        e["message"]


async def test_without_node_claims_watched_a_karpenter_plan_is_a_configuration_retry(
        world: w.World) -> None:
    world.seed(*base(count=2))
    stores = inputs.Stores.of({kk: v for kk, v in world.stores.items()
                            if kk not in (kinds.NODE_CLAIM, kinds.NODE_POOL)})
    r = wlr.WorkloadReconciler(world.api, stores, world.inventory, clock=world.clock)
    await world.reconcile(r)
    assert claims(world) == []
    assert "does not watch Karpenter's NodeClaims" in world.entry()["message"]


async def test_node_claim_events_wake_their_workload(world: w.World) -> None:
    from admission.kube import client
    world.seed(*base())
    await world.reconcile()
    r = world.reconciler()
    x = claims(world)[0]
    assert list(r.keys(kinds.NODE_CLAIM, client.WatchEvent("MODIFIED", x), None)) == [
        "default/train"]
    node = w.node("kwok-z", created=w.NEW)[0]
    assert "default/train" in r.keys(kinds.NODE, client.WatchEvent("ADDED", node), None)


def test_claim_names_fit_a_hostname_label() -> None:
    name = k.claim_name("a-very-long-namespace-name-indeed", "x" * 80, "fitgate", 3, 1, 7)
    assert len(name) <= 63
    assert name == k.claim_name("a-very-long-namespace-name-indeed", "x" * 80, "fitgate", 3,
                                1, 7)
    assert name != k.claim_name("a-very-long-namespace-name-indeed", "x" * 80, "fitgate", 3,
                                1, 8)


def test_a_plan_across_backends_is_refused() -> None:
    shapes = {"h100": fitcore.node_shape(karpenter_shape()),
              "a100": fitcore.node_shape(w.shape("a100"))}
    mixed = fitcore.Plan((fitcore.ShapeCount("h100", 1), fitcore.ShapeCount("a100", 1)),
                         Fraction(0))
    with pytest.raises(provisioning.ShapeProblem, match="mixes shapes Karpenter serves"):
        backends.backend_of(mixed, shapes)
    only = fitcore.Plan((fitcore.ShapeCount("h100", 2),), Fraction(0))
    assert backends.backend_of(only, shapes) == backends.KARPENTER
    assert json.loads(provisioning.plan_to_json(only))["shapes"][0]["count"] == 2


async def test_a_single_node_pin_names_the_nodes_hostname_label(world: w.World) -> None:
    # Karpenter's kwok provider (and a kubelet with --hostname-override) labels a node
    # kubernetes.io/hostname with something other than its name: the pin must name the
    # label's value, or it matches no node and the admitted gang stays Pending.
    world.seed(*w.base(), *w.node("kwok-n1-long-name", **{c.HOSTNAME_LABEL: "claim-n1"}),
               w.admitted())
    assert await world.reconcile() is None
    e = world.entry()
    assert e["state"] == "Ready", e["message"]
    assert e["podSetUpdates"][0]["nodeSelector"] == {c.HOSTNAME_LABEL: "claim-n1"}
