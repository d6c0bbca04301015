"""Trust only what fitgate wrote: ProvisioningRequests labelled as fitgate's that fitgate
did not write for a Workload it knows are ignored (named, logged), and the service goes on."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from admission import constants as c
from admission.check import provisioning, trusted
from admission.kube import kinds
from tests.admission import world as w


@pytest.fixture
def world() -> Iterator[w.World]:
    out = w.World()
    yield out
    out.inventory.inner.close()


def fake_request(namespace: str = "elsewhere", name: str = "fake", *,
                 workload: str = "elsewhere/ghost", uid: str = "ghost-uid",
                 plan: str = '{"shapes":[{"shape":"h100","count":1e999}]}',
                 created: str = "2025-12-31T00:00:00Z") -> dict[str, Any]:
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": namespace,
                         "creationTimestamp": created, "resourceVersion": "1",
                         "labels": {c.MANAGED_LABEL: "fitgate", c.WORKLOAD_UID_LABEL: uid,
                                    c.WORKLOAD_NAME_LABEL: workload.partition("/")[2],
                                    c.CHECK_LABEL: "fitgate", c.ATTEMPT_LABEL: "1"},
                         "annotations": {c.WORKLOAD_ANNOTATION: workload,
                                         c.PLAN_ANNOTATION: plan,
                                         c.PLAN_INDEX_ANNOTATION: "0"}},
            "spec": {"provisioningClassName": c.DEFAULT_PROVISIONING_CLASS,
                     "podSets": [{"podTemplateRef": {"name": "ppt-fake-h100"}, "count": 1}]}}


async def test_a_request_with_an_absurd_count_in_another_namespace_breaks_no_decision(
        world: w.World) -> None:
    # The plan annotation's 1e999 is a float infinity: int() raised OverflowError in
    # every Workload's decision (each reads every request to know whose new nodes are).
    world.seed(*w.base(), w.shape("h100"), fake_request(), w.admitted(w.workers(2)))
    assert await world.reconcile() == 60.0
    assert world.entry()["state"] == "Pending"
    assert world.request_names() == ["fake", "train-fitgate-1"]


async def test_a_well_formed_fake_request_owns_no_new_node(world: w.World) -> None:
    # A fake request, older than fitgate's, with a well-formed plan for one h100: it
    # "owned" the first new h100 node, so fitgate kept that node from the gang it bought
    # it for and waited (or bought another).
    world.seed(*w.base(), w.shape("h100"),
               fake_request("default", plan='{"shapes":[{"shape":"h100","count":1}]}',
                            workload="default/ghost"),
               w.admitted(w.workers(2)))
    await world.reconcile()
    assert world.request_names() == ["fake", "train-fitgate-1"]
    world.set_request_condition("train-fitgate-1", c.PROVISIONED)
    world.seed(*w.node("h100-a", created=w.NEW, shape="h100"))
    world.advance(60)
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Ready", e
    assert "verified on the nodes of ProvisioningRequest train-fitgate-1" in e["message"]


def _ours(world: w.World) -> dict[str, Any]:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    asyncio.run(world.reconcile())
    return copy.deepcopy(world.requests()[0])


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        into = obj
        for k in path[:-1]:
            into = into[k]
        into[path[-1]] = value
    return change


PLAN = ("metadata", "annotations", c.PLAN_ANNOTATION)
BAD = [
    ("other-namespace", _set(("metadata", "namespace"), "elsewhere"),
     "metadata.annotations['fitgate.io/workload']"),
    ("unknown-workload", _set(("metadata", "annotations", c.WORKLOAD_ANNOTATION),
                              "default/ghost"), "Workload default/ghost is not known"),
    ("wrong-uid", _set(("metadata", "labels", c.WORKLOAD_UID_LABEL), "x"),
     "metadata.labels['fitgate.io/workload-uid']"),
    ("not-our-check", _set(("metadata", "labels", c.CHECK_LABEL), "prov"),
     "metadata.labels['fitgate.io/check']"),
    ("attempt-not-a-number", _set(("metadata", "labels", c.ATTEMPT_LABEL), "x"),
     "metadata.labels['fitgate.io/attempt']"),
    ("name-not-fitgates", _set(("metadata", "name"), "train-fitgate-7"), "metadata.name"),
    ("count-infinite", _set(PLAN, '{"shapes":[{"shape":"h100","count":1e999}]}'),
     "metadata.annotations['fitgate.io/plan'].shapes[0].count"),
    ("count-huge", _set(PLAN, '{"shapes":[{"shape":"h100","count":1000000}]}'),
     "metadata.annotations['fitgate.io/plan'].shapes[0].count"),
    ("count-5000-digits", _set(PLAN, '{"shapes":[{"shape":"h100","count":' + "9" * 5000
                                     + "}]}"),
     "metadata.annotations['fitgate.io/plan']"),
    ("plan-not-json", _set(PLAN, "{"), "metadata.annotations['fitgate.io/plan']: not JSON"),
    ("plan-deep", _set(PLAN, "[" * 100_000), "metadata.annotations['fitgate.io/plan']"),
    ("alternatives-not-a-list", _set(("metadata", "annotations", c.ALTERNATIVES_ANNOTATION),
                                     "{}"), "metadata.annotations['fitgate.io/alternatives']"),
    ("pod-sets-more-nodes", _set(("spec", "podSets"), [
        {"podTemplateRef": {"name": "ppt-train-fitgate-1-h100"}, "count": 9}]), "spec.podSets"),
]


@pytest.mark.parametrize(("change", "field"), [(b[1], b[2]) for b in BAD],
                         ids=[b[0] for b in BAD])
def test_read_names_object_and_field(world: w.World, change: Callable[[dict[str, Any]], None],
                                     field: str) -> None:
    r = _ours(world)
    got = trusted.read(r, world.stores[kinds.WORKLOAD], {"fitgate"})
    assert got is not None and got.name == "train-fitgate-1" and got.attempt == 1
    assert [(s.shape, s.count) for s in got.plan.shapes] == [("h100", 1)]
    change(r)
    with pytest.raises(trusted.Untrusted) as info:
        trusted.read(r, world.stores[kinds.WORKLOAD], {"fitgate"})
    assert str(info.value).startswith(
        f"ProvisioningRequest {r['metadata']['namespace']}/{r['metadata']['name']}: ")
    assert field in str(info.value)


def test_not_labelled_as_fitgates_is_not_read(world: w.World) -> None:
    r = fake_request()
    del r["metadata"]["labels"][c.MANAGED_LABEL]
    assert trusted.read(r, world.stores[kinds.WORKLOAD], {"fitgate"}) is None


def test_plan_as_written_reads_back(world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(4)))
    asyncio.run(world.reconcile())
    r = world.requests()[0]
    got = trusted.read(r, world.stores[kinds.WORKLOAD], {"fitgate"})
    assert got is not None
    assert provisioning.plan_to_json(got.plan) == r["metadata"]["annotations"][
        c.PLAN_ANNOTATION]
    assert json.loads(r["metadata"]["annotations"][c.ALTERNATIVES_ANNOTATION]) == [
        json.loads(provisioning.plan_to_json(p)) for p in got.alternatives]


async def test_fitgates_own_request_with_an_absurd_count_is_deleted_and_asked_again(
        world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    await world.reconcile()
    (pr,) = world.requests()
    pr["metadata"]["annotations"][c.PLAN_ANNOTATION] = \
        '{"shapes":[{"shape":"h100","count":1e999}]}'
    world.seed(pr)
    assert await world.reconcile() == 1.0
    assert world.requests() == []
    await world.reconcile()
    (again,) = world.requests()
    assert provisioning.plan_from_json(again["metadata"]["annotations"][c.PLAN_ANNOTATION])


async def test_a_kept_reading_follows_its_workload_and_the_checks(world: w.World) -> None:
    # Every decision reads every request; the reading is kept while the request, its
    # Workload and fitgate's checks are the same objects, and made again when any changes.
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    await world.reconcile()
    requests, workloads = world.stores[kinds.PROVISIONING_REQUEST], world.stores[kinds.WORKLOAD]

    def read(checks: tuple[str, ...] = ("fitgate",)) -> list[str]:
        return [r.name for r in trusted.trusted_requests(requests, workloads, checks)]
    assert read() == ["train-fitgate-1"] == read()
    train = copy.deepcopy(world.workload())
    train["metadata"]["uid"] = "a-new-uid"  # deleted and made again under the same name
    workloads.seed(train)
    assert read() == []
    request = copy.deepcopy(requests.list()[0])
    request["metadata"]["labels"][c.WORKLOAD_UID_LABEL] = "a-new-uid"
    requests.seed(request)
    assert read() == ["train-fitgate-1"]
    assert read(("another",)) == []
