"""The Workload reconciler, step by step, over the FakeClient with a fake clock."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

import fitcore
from admission import constants as c
from admission.check import inputs, ledger, provisioning
from admission.check import workload as wlr
from admission.engine import fitting
from admission.kube import client, errors, kinds
from tests.admission import builders as ab
from tests.admission import world as w


@pytest.fixture
def world() -> Iterator[w.World]:
    out = w.World()
    yield out
    out.inventory.inner.close()


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# ------------------------------------------------------------------ fits now


async def test_fits_existing_nodes_is_ready_with_pins_and_no_request(world: w.World) -> None:
    world.seed(*w.base(), *w.node("n1"), w.admitted())
    before = metric("fitgate_decisions_total", verdict="Ready", category="none")
    waited = metric("fitgate_quota_to_ready_seconds_count")
    planned = metric("fitgate_decision_seconds_count", operation="plan")
    assert await world.reconcile() is None
    e = world.entry()
    assert e["state"] == "Ready"
    assert e["message"].startswith("fits on existing nodes: 2 pods on 1 nodes (n1)")
    uid = world.workload()["metadata"]["uid"]
    assert e["podSetUpdates"] == [{
        "name": "workers",
        "labels": {c.PLACEMENT_LABEL: uid, c.POD_SET_LABEL: "workers"},
        "nodeSelector": {c.HOSTNAME_LABEL: "n1"}}]
    assert e["lastTransitionTime"] == "2026-01-01T00:00:30Z"
    assert world.requests() == []
    cm = world.api.find(kinds.CONFIG_MAP, c.PLACEMENTS_PREFIX + uid, "default")
    assert cm is not None
    assert json.loads(cm["data"][c.PLACEMENTS_KEY]) == [
        {"podSet": "workers", "index": 0, "node": "n1"},
        {"podSet": "workers", "index": 1, "node": "n1"}]
    assert cm["metadata"]["ownerReferences"][0]["uid"] == uid
    assert metric("fitgate_decisions_total", verdict="Ready", category="none") == before + 1
    assert metric("fitgate_quota_to_ready_seconds_count") == waited + 1
    assert metric("fitgate_decision_seconds_count", operation="plan") == planned + 1
    # Our entry only, as fitgate's field manager, on the status subresource.
    call = world.api.verbs("patch", kinds.WORKLOAD)[-1]
    assert call.subresource == "status"
    assert call.body["fieldManager"] == c.FIELD_MANAGER
    assert [x["name"] for x in call.body["apply"]["status"]["admissionChecks"]] == ["fitgate"]


async def test_other_checks_entries_are_left_alone(world: w.World) -> None:
    world.seed(*w.base(), *w.node("n1"), w.admission_check("prov", "kueue.x-k8s.io/x"),
               w.admitted(checks=("fitgate", "prov")))
    world.set_entry(check="prov", message="theirs")
    await world.reconcile()
    assert world.entry(check="prov")["message"] == "theirs"
    assert world.entry(check="prov")["state"] == "Pending"
    assert world.entry()["state"] == "Ready"


@pytest.mark.parametrize("change", ["no-quota", "not-ours", "already-ready", "retry-state"])
async def test_skips_what_is_not_pending_with_quota(world: w.World, change: str) -> None:
    wl = w.admitted(reserved=change != "no-quota",
                    state={"already-ready": "Ready", "retry-state": "Retry"}.get(change,
                                                                                 "Pending"))
    ac = w.admission_check(controller="someone.else/check" if change == "not-ours"
                           else c.CONTROLLER_NAME)
    world.seed(*w.base(), ac, *w.node("n1"), wl)
    assert await world.reconcile() is None
    assert world.status_writes() == 0
    assert world.inventory.calls == []


async def test_a_second_pass_writes_nothing(world: w.World) -> None:
    # A check that stays Pending (waiting for the nodes its request asks for), so the
    # second pass reaches the status write and finds nothing changed (a Rejected check
    # would return before it).
    grouped = w.cpu_node("cpu-2")
    grouped["metadata"]["labels"][w.SHAPE_LABEL] = "h100"
    world.seed(*w.base(), grouped, w.shape("h100"), w.admitted(w.workers(4)))
    await world.reconcile()  # plans and asks for nodes
    await world.reconcile()  # says it waits for the autoscaler
    assert world.entry()["state"] == "Pending"
    assert "waiting for the autoscaler" in world.entry()["message"]
    writes = world.status_writes()
    assert writes == 2
    await world.reconcile()  # nothing changed: nothing written
    assert world.status_writes() == writes


# ------------------------------------------------------------ needs capacity


async def test_needs_capacity_creates_one_request_for_the_plans_exact_shape(
        world: w.World) -> None:
    # cpu-2 carries the shape's label (the placeholder's nodeSelector matches it) but no
    # GPU; cpu-1 (from base) does not.
    grouped = w.cpu_node("cpu-2")
    grouped["metadata"]["labels"][w.SHAPE_LABEL] = "h100"
    world.seed(*w.base(), grouped, w.shape("h100"), w.admitted(w.workers(4)))
    wait = await world.reconcile()
    assert wait == 60.0
    assert world.request_names() == ["train-fitgate-1"]
    pr = world.requests()[0]
    meta = pr["metadata"]
    assert "ownerReferences" not in meta
    uid = world.workload()["metadata"]["uid"]
    assert meta["labels"] == {c.MANAGED_LABEL: "fitgate", c.WORKLOAD_UID_LABEL: uid,
                              c.WORKLOAD_NAME_LABEL: "train", c.CHECK_LABEL: "fitgate",
                              c.ATTEMPT_LABEL: "1"}
    assert meta["annotations"][c.WORKLOAD_ANNOTATION] == "default/train"
    stored = provisioning.plan_from_json(meta["annotations"][c.PLAN_ANNOTATION])
    assert [(s.shape, s.count) for s in stored.shapes] == [("h100", 2)]
    assert pr["spec"] == {
        "provisioningClassName": c.DEFAULT_PROVISIONING_CLASS,
        "podSets": [{"podTemplateRef": {"name": "ppt-train-fitgate-1-h100"}, "count": 2}]}
    tpl = world.api.find(kinds.POD_TEMPLATE, "ppt-train-fitgate-1-h100", "default")
    assert tpl is not None
    spec = tpl["template"]["spec"]
    assert spec["nodeSelector"] == {w.SHAPE_LABEL: "h100"}
    # one node's share: two workers of 8 cpu each
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "16"}}
    assert "resourceClaims" not in spec
    term = spec["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == c.HOSTNAME_LABEL
    # Every placeholder repels every other (two requests never share a new node), and
    # none lands on a node fitcore already found wanting (the autoscaler sees only CPU):
    # the existing nodes of the shape's group are listed; cpu-1, which the nodeSelector
    # keeps it off anyway, is not (the list grows with the group, not the cluster).
    assert term["labelSelector"] == {"matchExpressions": [
        {"key": c.PLACEHOLDER_LABEL, "operator": "Exists"}]}
    assert spec["affinity"]["nodeAffinity"] == {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": c.HOSTNAME_LABEL, "operator": "NotIn", "values": ["cpu-2"]}]}]}}
    assert tpl["template"]["metadata"]["labels"][c.PLACEHOLDER_LABEL] == "train-fitgate-1"
    # templates before the request: the autoscaler fails a request without them
    creates = [x.kind for x in world.api.verbs("create")]
    assert creates.index("PodTemplate") < creates.index("ProvisioningRequest")
    e = world.entry()
    assert e["state"] == "Pending"
    assert e["message"].startswith("capacity: asked the autoscaler for 2 × h100 "
                                   "(ProvisioningRequest train-fitgate-1)")


async def test_provisioning_class_and_parameters_come_from_the_shape(world: w.World) -> None:
    s = w.shape("h100")
    s["spec"]["provisioning"] = {"className": "check-capacity.autoscaling.x-k8s.io",
                                 "parameters": {"ValidUntilSeconds": "600"}}
    world.seed(*w.base(), s, w.admitted(w.workers(2)))
    await world.reconcile()
    spec = world.requests()[0]["spec"]
    assert spec["provisioningClassName"] == "check-capacity.autoscaling.x-k8s.io"
    assert spec["parameters"] == {"ValidUntilSeconds": "600"}


async def test_pending_request_keeps_the_check_pending(world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    await world.reconcile()
    first = world.entry()
    world.set_request_condition("train-fitgate-1", c.ACCEPTED)
    world.advance(5)
    assert await world.reconcile() == 60.0
    e = world.entry()
    assert e["state"] == "Pending"
    assert "waiting for the autoscaler: 1 × h100 asked by ProvisioningRequest " \
        "train-fitgate-1 (accepted)" in e["message"]
    assert e["lastTransitionTime"] == first["lastTransitionTime"]  # same state, kept
    assert world.request_names() == ["train-fitgate-1"]


# ------------------------------------------------------- request deadline


@pytest.mark.parametrize("accepted", [False, True], ids=["unanswered", "accepted"])
async def test_a_request_past_its_deadline_is_deleted_and_the_check_retried(
        world: w.World, accepted: bool) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(4)))
    r = world.reconciler(request_timeout_seconds=300)
    # The request is created at 00:00:00 and it is 00:00:30: the poll comes no later
    # than the deadline.
    assert await world.reconcile(r) == 60.0
    assert world.request_names() == ["train-fitgate-1"]
    if accepted:
        world.set_request_condition("train-fitgate-1", c.ACCEPTED)
    world.advance(240)  # 270 s after the request: 30 s left
    assert await world.reconcile(r) == 30.0
    assert world.entry()["state"] == "Pending"
    timed_out = metric("fitgate_provisioning_requests_total", outcome="timed-out")
    world.advance(30)
    assert await world.reconcile(r) is None
    e = world.entry()
    assert e["state"] == "Retry"
    assert e["requeueAfterSeconds"] == 60
    said = "accepted but not provisioned" if accepted else "neither accepted nor provisioned"
    assert e["message"] == (
        f"capacity: ProvisioningRequest train-fitgate-1 was {said} after waiting 300s "
        "(deadline 300s); the autoscaler did not answer in time (retry in 60s)")
    assert world.requests() == []
    assert world.api.objects(kinds.POD_TEMPLATE) == []
    assert metric("fitgate_provisioning_requests_total", outcome="timed-out") == timed_out + 1
    # Kueue evicts, resets the check to Pending with retryCount 1: attempt 2 starts clean,
    # with a deadline of its own.
    world.set_entry(state="Pending", retryCount=1, message="Reset to Pending after eviction")
    world.api.creation_time = "2026-01-01T00:10:00Z"
    world.now = world.now.replace(minute=10, second=0)
    assert await world.reconcile(r) == 60.0
    assert world.request_names() == ["train-fitgate-2"]
    (pr,) = world.requests()
    assert pr["metadata"]["labels"][c.ATTEMPT_LABEL] == "2"
    assert [t["metadata"]["name"] for t in world.api.objects(kinds.POD_TEMPLATE)] == [
        "ppt-train-fitgate-2-h100"]
    assert world.entry()["state"] == "Pending"


async def test_the_deadline_survives_a_restart(world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(4)))
    await world.reconcile(world.reconciler(request_timeout_seconds=120))
    world.advance(80)  # 110 s after the request
    # A new instance (fresh memory) counts from the request's creationTimestamp.
    assert await world.reconcile(world.reconciler(request_timeout_seconds=120)) == 10.0
    world.advance(10)
    await world.reconcile(world.reconciler(request_timeout_seconds=120))
    assert world.entry()["state"] == "Retry"
    assert "after waiting 120s (deadline 120s)" in world.entry()["message"]
    assert world.requests() == []
    assert len(world.api.verbs("create", kinds.PROVISIONING_REQUEST)) == 1


async def test_no_deadline_when_it_is_zero_and_none_once_provisioned(world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(4)))
    await world.reconcile(world.reconciler(request_timeout_seconds=0))
    world.advance(86400)
    assert await world.reconcile(world.reconciler(request_timeout_seconds=0)) == 60.0
    assert world.entry()["state"] == "Pending"
    assert world.request_names() == ["train-fitgate-1"]
    # Provisioned: the deadline no longer applies (provisioning_wait bounds what follows).
    world.set_request_condition("train-fitgate-1", c.PROVISIONED,
                                at="2026-01-02T00:00:00Z")
    await world.reconcile(world.reconciler(request_timeout_seconds=60))
    assert world.entry()["state"] == "Pending"
    assert "is provisioned; waiting for the new nodes" in world.entry()["message"]
    assert world.request_names() == ["train-fitgate-1"]


async def test_capacity_freed_while_pending_admits_and_drops_the_request(
        world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    await world.reconcile()
    assert world.request_names() == ["train-fitgate-1"]
    world.set_request_condition("train-fitgate-1", c.ACCEPTED)
    world.seed(*w.node("n1"))  # a node freed up (or was added by someone else)
    assert await world.reconcile() is None
    e = world.entry()
    assert e["state"] == "Ready"
    assert e["message"].startswith("fits on existing nodes (freed while ProvisioningRequest "
                                   "train-fitgate-1 was pending): 2 pods on 1 nodes (n1)")
    assert "annotations" not in e["podSetUpdates"][0]  # nothing to consume
    assert world.requests() == []
    assert world.api.objects(kinds.POD_TEMPLATE) == []


async def test_nodes_added_for_the_request_before_it_says_provisioned_are_not_taken(
        world: w.World) -> None:
    """The autoscaler may add the nodes before its Provisioned condition is written (a
    conflict delays it): they are the request's, and are verified and consumed on the
    Provisioned path, not taken as freed capacity."""
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    await world.reconcile()
    world.set_request_condition("train-fitgate-1", c.ACCEPTED)
    world.seed(*w.node("h100-a", created=w.NEW, shape="h100"))
    await world.reconcile()
    assert world.entry()["state"] == "Pending"
    assert world.request_names() == ["train-fitgate-1"]
    world.set_request_condition("train-fitgate-1", c.PROVISIONED)
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Ready"
    assert e["podSetUpdates"][0]["annotations"][c.CONSUME_ANNOTATION] == "train-fitgate-1"


async def test_a_node_another_gangs_request_brought_is_not_taken_from_it(
        world: w.World) -> None:
    """Two gangs need a new h100 node each. `train` asked first; its node arrives before
    `other` is decided. That node is `train`'s: `other` asks for its own instead of
    taking it (e2e scenario 11, four big gangs: the second took the first's node, whose
    verification then failed as a 'coordination' misfit)."""
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    await world.reconcile()
    world.set_request_condition("train-fitgate-1", c.PROVISIONED)
    world.seed(*w.node("h100-a", created=w.NEW, shape="h100"),
               w.admitted(w.workers(2), name="other"))
    await world.reconcile(name="other")
    assert world.entry("other")["state"] == "Pending"
    assert world.request_names() == ["other-fitgate-1", "train-fitgate-1"]
    await world.reconcile()
    assert world.entry()["state"] == "Ready"
    assert world.entry()["message"].startswith("verified on the nodes of ProvisioningRequest")


# ----------------------------------------------------------- restart safety


async def test_a_second_reconciler_creates_no_duplicate_and_converges(world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(4)))
    # The first instance creates the request, then dies before writing the check.
    world.api.fail_next(errors.ApiError(0, "Unavailable", "connection lost"), verb="patch",
                        kind=kinds.WORKLOAD)
    with pytest.raises(errors.ApiError):
        await world.reconcile(world.reconciler())
    assert world.request_names() == ["train-fitgate-1"]
    assert world.entry()["message"] == ""
    # A new instance (fresh memory) over the same API state.
    await world.reconcile(world.reconciler())
    assert world.request_names() == ["train-fitgate-1"]
    assert len(world.api.verbs("create", kinds.PROVISIONING_REQUEST)) == 1
    assert world.entry()["message"].startswith("capacity: waiting for the autoscaler")
    # ... and admits once the nodes came, with the plan read back from the annotation.
    world.set_request_condition("train-fitgate-1", c.PROVISIONED)
    world.seed(*w.node("h100-a", created=w.NEW, shape="h100"),
               *w.node("h100-b", created=w.NEW, shape="h100"))
    await world.reconcile(world.reconciler())
    assert world.entry()["state"] == "Ready"
    assert len(world.api.verbs("create", kinds.PROVISIONING_REQUEST)) == 1


async def test_crash_after_templates_before_request(world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    world.api.fail_next(errors.ApiError(0, "Unavailable", "gone"), verb="create",
                        kind=kinds.PROVISIONING_REQUEST)
    with pytest.raises(errors.ApiError):
        await world.reconcile()
    assert world.requests() == []
    await world.reconcile(world.reconciler())
    assert world.request_names() == ["train-fitgate-1"]
    assert len(world.api.objects(kinds.POD_TEMPLATE)) == 1


# ------------------------------------------------------- provisioned, verify


async def _provisioned(world: w.World, count: int = 4) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(count)))
    await world.reconcile()
    world.set_request_condition("train-fitgate-1", c.PROVISIONED)


async def test_provisioned_waits_for_ready_nodes_and_slices(world: w.World) -> None:
    await _provisioned(world)
    world.seed(*w.node("h100-a", created=w.NEW, shape="h100"),
               w.node("h100-b", created=w.NEW, shape="h100", ready=False)[0])
    world.now = w.EPOCH.replace(minute=1, second=30)
    wait = await world.reconcile()
    assert wait is not None and wait <= c.NODE_POLL_SECONDS
    e = world.entry()
    assert e["state"] == "Pending"
    assert "h100: 1 of 2 new nodes ready with their ResourceSlices" in e["message"]
    assert "verify" not in world.inventory.calls


async def test_a_ready_node_still_tainted_not_ready_is_waited_for_not_judged(
        world: w.World) -> None:
    # The node lifecycle controller removes node.kubernetes.io/not-ready a moment after
    # the Ready condition turns True; verifying in between would call the node a misfit.
    await _provisioned(world)
    starting = w.node("h100-b", created=w.NEW, shape="h100")
    starting[0].setdefault("spec", {})["taints"] = [{"key": "node.kubernetes.io/not-ready",
                                      "effect": "NoSchedule"}]
    world.seed(*w.node("h100-a", created=w.NEW, shape="h100"), *starting)
    wait = await world.reconcile()
    assert wait is not None and wait <= c.NODE_POLL_SECONDS
    e = world.entry()
    assert e["state"] == "Pending", e["message"]
    assert "h100: 1 of 2 new nodes ready with their ResourceSlices" in e["message"]
    assert world.request_names() == ["train-fitgate-1"]
    starting[0]["spec"]["taints"] = []
    world.seed(starting[0])
    assert await world.reconcile() is None
    assert world.entry()["state"] == "Ready", world.entry()["message"]


async def test_provisioned_and_verified_is_ready_with_consume_annotations(
        world: w.World) -> None:
    await _provisioned(world)
    world.seed(*w.node("h100-a", created=w.NEW, shape="h100"),
               *w.node("h100-b", created=w.NEW, shape="h100"))
    before = metric("fitgate_provisioning_requests_total", outcome="verified")
    assert await world.reconcile() is None
    e = world.entry()
    assert e["state"] == "Ready", e["message"]
    assert e["message"].startswith("verified on the nodes of ProvisioningRequest "
                                   "train-fitgate-1: 4 pods on 2 nodes (h100-a, h100-b)")
    (update,) = e["podSetUpdates"]
    assert update["annotations"] == {c.CONSUME_ANNOTATION: "train-fitgate-1",
                                     c.CLASS_ANNOTATION: c.DEFAULT_PROVISIONING_CLASS}
    assert update["labels"][c.PLACEMENT_LABEL] == world.workload()["metadata"]["uid"]
    assert "nodeSelector" not in update  # two nodes, no domain: pods are pinned one by one
    assert world.request_names() == ["train-fitgate-1"]  # kept: the pods consume it
    assert metric("fitgate_provisioning_requests_total", outcome="verified") == before + 1
    uid = world.workload()["metadata"]["uid"]
    cm = world.api.find(kinds.CONFIG_MAP, c.PLACEMENTS_PREFIX + uid, "default")
    assert cm is not None
    nodes = [p["node"] for p in json.loads(cm["data"][c.PLACEMENTS_KEY])]
    assert sorted(set(nodes)) == ["h100-a", "h100-b"]


async def test_a_verify_pass_parses_each_nodeshape_once_and_scans_owners_once(
        world: w.World, monkeypatch: pytest.MonkeyPatch) -> None:
    # The verify pass needs the NodeShapes for the node owners, for readiness, for
    # verification and for the provisioning class; before the pass, it parsed them for
    # each (and scanned node ownership for readiness and again for the held nodes).
    await _provisioned(world)
    world.seed(*w.node("h100-a", created=w.NEW, shape="h100"),
               *w.node("h100-b", created=w.NEW, shape="h100"))
    parsed: list[str] = []
    scans: list[int] = []
    parse, scan = fitcore.node_shape, ledger.NodeLedger.node_owners

    def counting_parse(obj: object) -> fitcore.NodeShape:
        shape = parse(obj)  # type: ignore[arg-type]
        parsed.append(shape.name)
        return shape

    def counting_scan(self: ledger.NodeLedger, node_shapes: object) -> inputs.Owners:
        scans.append(1)
        return scan(self, node_shapes)  # type: ignore[arg-type]
    monkeypatch.setattr(fitcore, "node_shape", counting_parse)
    monkeypatch.setattr(ledger.NodeLedger, "node_owners", counting_scan)
    assert await world.reconcile() is None
    assert world.entry()["state"] == "Ready", world.entry()["message"]
    # At most once (none: the same object was parsed by an earlier pass, `inputs._PARSED`).
    assert parsed in ([], ["h100"])
    assert len(scans) == 1


async def test_misfit_retries_records_the_shape_and_releases_the_nodes(world: w.World) -> None:
    await _provisioned(world, count=2)
    # The node came with 2 GPUs instead of the 8 its shape promised.
    world.seed(*w.node("h100-a", created=w.NEW, shape="h100", gpus=2, roots=1,
                       nics=["pci0"]))
    world.now = w.EPOCH.replace(minute=11)
    before = metric("fitgate_verification_mismatches_total", shape="h100")
    assert await world.reconcile() is None
    e = world.entry()
    assert e["state"] == "Retry"
    assert e["requeueAfterSeconds"] == 60
    assert e["message"].startswith("coordination: the new nodes of ProvisioningRequest "
                                   "train-fitgate-1 do not keep their shapes' promise: ")
    assert "device gpu.example.com/gpu-2 is missing from its ResourceSlices" in e["message"]
    assert world.requests() == []
    assert world.api.objects(kinds.POD_TEMPLATE) == []
    shape = world.api.find(kinds.NODE_SHAPE, "h100")
    assert shape is not None
    verification = shape["status"]["verification"]
    assert verification["mismatchCount"] >= 6
    assert verification["lastMismatch"]["provisioningRequest"] == "train-fitgate-1"
    assert verification["lastMismatch"]["nodes"] == ["h100-a"]
    (event,) = world.api.objects(kinds.EVENT)
    assert event["reason"] == "ProvisionedNodesMisfit"
    assert event["type"] == "Warning"
    assert event["regarding"] == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                                  "name": "train", "namespace": "default",
                                  "uid": world.workload()["metadata"]["uid"]}
    # a DNS subdomain, as the API server validates it (a generateName may not end in ".")
    assert re.fullmatch(r"train\.[0-9a-f]{16}", event["metadata"]["name"])
    assert metric("fitgate_verification_mismatches_total", shape="h100") >= before + 6
    # 10 minutes since Provisioned (00:01 → 00:11) for one node nobody used
    assert metric("fitgate_unused_node_seconds_total", shape="h100") >= 600


async def test_nodes_that_never_come_end_as_misfit_after_the_wait(world: w.World) -> None:
    await _provisioned(world, count=2)
    world.now = w.EPOCH.replace(minute=1, second=10)
    assert await world.reconcile() == c.NODE_POLL_SECONDS
    world.now = w.EPOCH.replace(minute=16, second=1)  # node_wait_seconds = 900 after 00:01
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Retry"
    assert "after waiting 901s: h100: 0 of 1 new nodes ready" in e["message"]
    assert world.requests() == []


# ------------------------------------------- Failed / BookingExpired / Revoked


@pytest.mark.parametrize("condition,said", [
    (c.FAILED, "failed (no quota in zone)"),
    (c.BOOKING_EXPIRED, "expired before the gang was admitted (no quota in zone)"),
    (c.CAPACITY_REVOKED, "lost its capacity (no quota in zone)"),
])
async def test_request_failure_without_alternatives_retries_with_backoff(
        world: w.World, condition: str, said: str) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2), retry_count=2))
    await world.reconcile()
    assert world.request_names() == ["train-fitgate-3"]
    world.set_request_condition("train-fitgate-3", condition, message="no quota in zone")
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Retry"
    assert e["requeueAfterSeconds"] == 240  # 60·2^retryCount
    assert e["message"] == f"capacity: ProvisioningRequest train-fitgate-3 {said} (retry in 240s)"
    assert world.requests() == []


async def test_request_failure_moves_to_the_next_ranked_plan(world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100", price=10), w.shape("h200", price=20),
               w.admitted(w.workers(2)))
    await world.reconcile()
    (pr,) = world.requests()
    assert json.loads(pr["metadata"]["annotations"][c.PLAN_ANNOTATION])["shapes"][0][
        "shape"] == "h100"
    world.set_request_condition("train-fitgate-1", c.FAILED, message="stockout")
    await world.reconcile()
    assert world.request_names() == ["train-fitgate-1-alt1"]
    (alt,) = world.requests()
    assert alt["spec"]["podSets"][0]["podTemplateRef"]["name"] == \
        "ppt-train-fitgate-1-alt1-h200"
    assert alt["metadata"]["annotations"][c.PLAN_INDEX_ANNOTATION] == "1"
    assert json.loads(alt["metadata"]["annotations"][c.ALTERNATIVES_ANNOTATION]) == []
    e = world.entry()
    assert e["state"] == "Pending"
    assert e["message"].startswith("capacity: ProvisioningRequest train-fitgate-1 failed "
                                   "(stockout); next plan; asked the autoscaler for 1 × h200")
    # a restart in the middle finds the newest plan's request
    await world.reconcile(world.reconciler())
    assert world.request_names() == ["train-fitgate-1-alt1"]


# ------------------------------------------------- never Retry while evicted


@pytest.mark.parametrize("condition", [c.EVICTED, c.FINISHED])
async def test_no_retry_while_evicted_or_finished_and_requests_are_deleted(
        world: w.World, condition: str) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    await world.reconcile()
    world.set_request_condition("train-fitgate-1", c.FAILED)
    world.set_workload(**{condition: "True"})
    writes = world.status_writes()
    assert await world.reconcile() is None
    assert world.status_writes() == writes
    assert world.entry()["state"] == "Pending"
    assert world.requests() == []
    assert world.api.objects(kinds.POD_TEMPLATE) == []


async def test_eviction_between_decision_and_write_fails_the_write(world: w.World) -> None:
    """The write carries the resourceVersion decided on: a Workload evicted meanwhile
    makes it a Conflict, never a Retry on an evicted Workload."""
    world.seed(*w.base(), w.admitted(w.workers(2)))
    r = world.reconciler()
    world.refresh()
    # Kueue evicts after fitgate read the store, before it writes.
    wl = world.workload()
    wl["status"]["conditions"].append({"type": "Evicted", "status": "True", "reason": "x",
                                       "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})
    world.api.seed(kinds.WORKLOAD, wl)
    assert await r.reconcile("default/train") == 1.0
    world.refresh()
    assert world.entry()["state"] == "Pending"


async def test_workload_deleted_removes_its_requests(world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    await world.reconcile()
    world.api.remove(kinds.WORKLOAD, "train", "default")
    await world.reconcile()
    assert world.requests() == []
    assert world.api.objects(kinds.POD_TEMPLATE) == []


async def test_check_retried_deletes_the_old_attempt_and_asks_again(world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    await world.reconcile()
    world.set_entry(state="Retry", requeueAfterSeconds=60)
    await world.reconcile()
    assert world.requests() == []
    world.set_entry(state="Pending", retryCount=1, message="Reset to Pending after eviction")
    await world.reconcile()
    assert world.request_names() == ["train-fitgate-2"]


async def test_a_request_for_another_workload_of_the_same_name_is_deleted(
        world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    await world.reconcile()
    wl = world.workload()
    world.api.remove(kinds.WORKLOAD, "train", "default")
    del wl["metadata"]["uid"]
    wl["status"]["admissionChecks"][0]["message"] = ""
    world.seed(wl)  # recreated: a new uid
    await world.reconcile()
    (pr,) = world.requests()
    assert pr["metadata"]["labels"][c.WORKLOAD_UID_LABEL] == world.workload()["metadata"]["uid"]


# ------------------------------------------------------ never fits / bad input


async def test_never_fits_is_rejected_with_a_configuration_message(world: w.World) -> None:
    world.seed(*w.base(), w.admitted(w.workers(2)))  # no GPU node, no shape
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Rejected"
    assert e["message"].startswith("configuration: the gang can never fit: no node and no "
                                   "shape can host even one pod of workers")


async def test_beyond_the_shapes_limits_retries_as_capacity(world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100", max_nodes=1), w.admitted(w.workers(4)))
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Retry"
    assert e["message"].startswith("capacity: does not fit now")
    assert e["requeueAfterSeconds"] == 60


async def test_bad_workload_gets_a_message_and_others_are_still_served(
        world: w.World) -> None:
    broken = w.admitted(w.workers(2), name="broken")
    broken["spec"]["podSets"][0]["template"]["spec"]["resourceClaims"][0][
        "resourceClaimTemplateName"] = "missing"
    world.seed(*w.base(), *w.node("n1"), broken, w.admitted(w.workers(2)))
    await world.reconcile(name="broken")
    e = world.entry("broken")
    assert e["state"] == "Retry"
    assert e["message"].startswith("configuration: the workload cannot be read: Workload "
                                   "default/broken: spec.podSets[0].template.spec."
                                   "resourceClaims[0].resourceClaimTemplateName: "
                                   "ResourceClaimTemplate default/missing not found")
    await world.reconcile()
    assert world.entry()["state"] == "Ready"


async def test_undecided_within_the_budget_is_a_message_not_a_hang(world: w.World) -> None:
    from fitcore import plan

    world.seed(*w.base(), *w.node("n1"), w.admitted(w.workers(2)))

    class Undecided(w.Recorded):
        async def plan_async(self, gang_, *, shapes=None, node_filter=None, held=()):  # type: ignore[no-untyped-def]
            return plan.PlanResult("undecided", reasons=("work budget of 1 steps exceeded",))

    r = world.reconciler()
    r.inventory = Undecided(world.stores)
    await world.reconcile(r)
    e = world.entry()
    assert e["state"] == "Retry"
    assert e["message"].startswith("configuration: fitgate could not decide within its work "
                                   "budget")


# --------------------------------------------------- wiring into the runtime


async def test_keys_map_events_to_the_workloads_they_concern(world: w.World) -> None:
    from admission.kube import client

    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)),
               w.admitted(w.workers(2), name="other", checks=("someone-else",)))
    r = world.reconciler()
    await world.reconcile(r)
    ev = client.WatchEvent
    assert list(r.keys(kinds.WORKLOAD, ev("MODIFIED", world.workload()), None)) == [
        "default/train"]
    assert list(r.keys(kinds.WORKLOAD, ev("MODIFIED", world.workload("other")), None)) == []
    assert list(r.keys(kinds.WORKLOAD, ev("DELETED", world.workload("other")), None)) == [
        "default/other"]
    (pr,) = world.requests()
    assert list(r.keys(kinds.PROVISIONING_REQUEST, ev("MODIFIED", pr), None)) == [
        "default/train"]
    node = w.node("h100-a", created=w.NEW, shape="h100")[0]
    assert list(r.keys(kinds.NODE, ev("ADDED", node), None)) == []
    world.set_request_condition("train-fitgate-1", c.PROVISIONED)
    assert list(r.keys(kinds.NODE, ev("ADDED", node), None)) == ["default/train"]
    assert list(r.keys(kinds.ADMISSION_CHECK, ev("MODIFIED", w.admission_check()), None)) \
        == ["default/train"]


def test_serve_runs_the_workload_and_release_controllers() -> None:
    from admission import config
    from admission.app import components, serve

    svc = serve.Service(config.Config(leader_election=False, kube_version="1.37"),
                        w.fake.FakeClient(), factories=components.factories())
    assert {"workload", "release", "admissioncheck"} <= set(svc.runtime.queues)


# ------------------------------------------------------------- odd states


async def test_an_unreadable_plan_annotation_is_asked_again(world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    await world.reconcile()
    (pr,) = world.requests()
    pr["metadata"]["annotations"][c.PLAN_ANNOTATION] = "{not json"
    world.seed(pr)
    assert await world.reconcile() == 1.0
    assert world.requests() == []
    await world.reconcile()
    (again,) = world.requests()
    assert provisioning.plan_from_json(again["metadata"]["annotations"][c.PLAN_ANNOTATION])


async def test_after_a_crash_between_two_plans_the_newest_request_wins(
        world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100", price=10), w.shape("h200", price=20),
               w.admitted(w.workers(2)))
    await world.reconcile()
    world.set_request_condition("train-fitgate-1", c.FAILED)
    # The next plan's request was created, then the controller died before deleting the
    # failed one.
    world.api.fail_next(errors.ApiError(0, "Unavailable", "gone"), verb="delete",
                        kind=kinds.PROVISIONING_REQUEST)
    with pytest.raises(errors.ApiError):
        await world.reconcile()
    assert world.request_names() == ["train-fitgate-1", "train-fitgate-1-alt1"]
    await world.reconcile(world.reconciler())
    assert world.request_names() == ["train-fitgate-1-alt1"]
    assert world.entry()["message"].startswith("capacity: waiting for the autoscaler: 1 × h200")


async def test_a_plan_across_provisioning_classes_is_a_configuration_retry(
        world: w.World) -> None:
    launcher = w.workers(1)
    launcher["name"] = "launcher"
    cpu = w.shape("cpu", gpus=0, nics=[])
    cpu["spec"]["resourceSlices"] = []
    cpu["spec"]["provisioning"] = {"className": "check-capacity.autoscaling.x-k8s.io"}
    launcher["template"]["spec"].pop("resourceClaims")
    launcher["template"]["spec"]["nodeSelector"] = {w.SHAPE_LABEL: "cpu"}
    gpu_workers = w.workers(2, node_selector={w.SHAPE_LABEL: "h100"})
    wl = w.admitted(launcher, gpu_workers)
    world.seed(*w.base(), w.shape("h100"), cpu, wl)
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Retry"
    assert "mixes shapes of different provisioning classes" in e["message"]
    assert e["message"].startswith("configuration: cannot ask for the planned nodes")
    assert world.requests() == []


async def test_a_fitpolicy_keeps_the_plan_off_a_shape_it_does_not_allow(world: w.World) -> None:
    # Two shapes would do; the cheaper one is reserved for another tenant, so the check
    # (after quota, as the gate before it) plans the other.
    world.seed(*w.base(), w.shape("h100", price=1), w.shape("h100-dear", price=5),
               w.admitted(w.workers(4)))
    await world.reconcile()
    assert world.request_names() == ["train-fitgate-1"]
    planned = provisioning.plan_from_json(
        world.requests()[0]["metadata"]["annotations"][c.PLAN_ANNOTATION])
    assert [s.shape for s in planned.shapes] == ["h100"]

    other = w.admitted(w.workers(4), name="other")
    world.seed(other, ab.fit_policy("team-x-reserves-h100",
                                    subjects={"namespaces": ["team-x"]},
                                    reserved={"nodeShapes": ["h100"]}))
    await world.reconcile(name="other")
    mine = [r for r in world.requests()
            if r["metadata"]["labels"][c.WORKLOAD_NAME_LABEL] == "other"]
    assert len(mine) == 1
    planned = provisioning.plan_from_json(mine[0]["metadata"]["annotations"][c.PLAN_ANNOTATION])
    assert [s.shape for s in planned.shapes] == ["h100-dear"]


async def test_nodes_promised_to_an_admitted_gang_are_not_promised_again(
        world: w.World) -> None:
    # `train` is admitted on n1 (two of its three PCIe roots); until its pods bind, the
    # cluster still shows n1's devices free, yet `other` must not be promised them too
    # (one reconciler, as in the service). Its devices depend on the order the scheduler
    # takes them in (one PCIe root), so n1 is held whole for it while train's pods bind.
    world.seed(*w.base(), *w.node("n1", gpus=12, roots=3), w.admitted(),
               w.admitted(w.workers(1), name="other"))
    r = world.reconciler()
    assert await world.reconcile(r) is None
    assert world.entry()["state"] == "Ready"
    assert world.inventory.inner.assumed() == {}  # held whole, not counted
    # Waiting is all it takes (the third root of n1 holds `other` once train's pods are
    # bound): no request bought, no rejection, nothing written; asked again in moments,
    # and counted (fitgate_promise_waits_total: what scenario 11's burst prints).
    waits = REGISTRY.get_sample_value("fitgate_promise_waits_total") or 0.0
    assert await world.reconcile(r, name="other") == 2
    assert REGISTRY.get_sample_value("fitgate_promise_waits_total") == waits + 1
    assert world.entry("other")["state"] == "Pending"
    assert world.requests() == []
    # Once train's pods have bound on n1 (their devices are then the inventory's), the
    # promise ends; n1 is judged on what it really holds.
    uid = world.workload()["metadata"]["uid"]
    assert r.ledger.promised_nodes("someone-else") == {"n1"}
    for i in range(2):
        world.seed({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"train-{i}", "namespace": "default",
                                 "labels": {c.PLACEMENT_LABEL: uid}},
                    "spec": {"nodeName": "n1", "containers": []}})
    assert r.ledger.promised_nodes("someone-else") == set()


async def test_a_gang_waiting_for_promised_nodes_is_woken_when_they_bind(
        world: w.World) -> None:
    # As above: `other` waits for n1, promised to `train` until its two pods bind there.
    # The pod event that ends the promise queues `other` at once (the check watches
    # Pods), instead of leaving it to the poll; an event that does not is ignored.
    world.seed(*w.base(), *w.node("n1", gpus=12, roots=3), w.admitted(),
               w.admitted(w.workers(1), name="other"))
    r = world.reconciler()
    assert kinds.POD in r.watches
    assert await world.reconcile(r) is None
    assert await world.reconcile(r, name="other") == 2
    uid = world.workload()["metadata"]["uid"]

    def bound(i: int, node: str = "n1") -> dict[str, Any]:
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"train-{i}", "namespace": "default",
                            "labels": {c.PLACEMENT_LABEL: uid}},
               "spec": {"nodeName": node, "containers": []}}
        world.seed(pod)
        return pod

    def keys(pod: dict[str, Any]) -> list[str]:
        return list(r.keys(kinds.POD, client.WatchEvent("MODIFIED", pod), None))

    assert keys(bound(0)) == []          # one of two bound: n1 still promised
    assert keys(bound(9, "n2")) == []    # n2 is not a node `other` waits for
    # The last pod bound, but its claim's allocation not seen yet: not woken (its
    # devices would look free); once the claim is allocated, the pod's next event wakes.
    last = bound(1)
    last["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "c1"}]}
    world.seed(last)
    assert keys(last) == []
    world.seed({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "c1", "namespace": "default"},
                "spec": {}, "status": {"allocation": {"devices": {"results": []}}}})
    assert keys(last) == ["default/other"]
    assert keys(bound(1)) == []          # woken once
    assert await world.reconcile(r, name="other") is None
    assert world.entry("other")["state"] == "Ready"


async def test_a_gang_that_fits_no_busy_node_is_retried_not_rejected(world: w.World) -> None:
    # n1 is the only node the gangs select. `train` is admitted there (promised until its
    # pod binds); `other` fits no node now (n1 promised, and busy: a running pod holds 50
    # of its 64 CPUs), which on the real usage reads as "no node can host it"
    # (configuration). Rejected would deactivate the Workload for good, yet on an idle n1
    # it fits: a matter of capacity, retried (the gate's question, asked again here).
    busy = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "busy", "namespace": "default", "uid": "busy-uid"},
            "spec": {"nodeName": "n1", "containers": [
                {"name": "main", "resources": {"requests": {"cpu": "50"}}}]},
            "status": {"phase": "Running"}}
    world.seed(*w.base(), *w.node("n1"), busy, w.admitted(w.workers(1)),
               w.admitted(w.workers(1, cpu="20"), name="other"))
    r = wlr.WorkloadReconciler(world.api, inputs.Stores.of(world.stores), world.inventory,
                               clock=world.clock,
                               idle=fitting.StoreEngine(world.stores, idle=True))
    assert await world.reconcile(r) is None
    assert world.entry()["state"] == "Ready"
    await world.reconcile(r, name="other")
    e = world.entry("other")
    assert e["state"] == "Retry", e
    assert e["message"].startswith("capacity: does not fit now"), e["message"]
    # n1 is named as held for `train`, not as refused by a policy nobody wrote.
    assert "1 node is held for other workloads until their pods are on them (n1)" in \
        e["message"], e["message"]
    assert "policy" not in e["message"], e["message"]
    # What fits no node even idle is still Rejected: 80 CPUs on a 64-CPU node.
    world.seed(w.admitted(w.workers(1, cpu="80"), name="huge"))
    await world.reconcile(r, name="huge")
    assert world.entry("huge")["state"] == "Rejected"
    assert world.entry("huge")["message"].startswith("configuration: the gang can never fit")


async def test_a_request_asked_again_keeps_its_templates_as_the_server_stored_them(
        world: w.World) -> None:
    """The API server fills defaults into a PodTemplate, so the stored one never reads back
    as written: fitgate compares its digest annotation, and asking again for a request that
    vanished (e.g. `fitgate release --all` deleted it) keeps the same templates instead of
    deleting and recreating them under whoever is deleting them."""
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(4)))
    await world.reconcile()
    name = "ppt-train-fitgate-1-h100"
    stored = world.api.find(kinds.POD_TEMPLATE, name, "default")
    assert stored is not None
    assert stored["metadata"]["annotations"][c.TEMPLATE_DIGEST_ANNOTATION] == \
        provisioning.digest(stored["template"])
    stored["template"]["spec"].update(restartPolicy="Always", dnsPolicy="ClusterFirst")
    world.api.seed(kinds.POD_TEMPLATE, stored)
    world.api.remove(kinds.PROVISIONING_REQUEST, "train-fitgate-1", "default")
    await world.reconcile()
    assert world.request_names() == ["train-fitgate-1"]  # asked again
    assert world.api.verbs("delete", kinds.POD_TEMPLATE) == []
    again = world.api.find(kinds.POD_TEMPLATE, name, "default")
    assert again is not None and again["template"]["spec"]["restartPolicy"] == "Always"

    # A template of another plan under the same name (left by a crash) is replaced.
    again["metadata"]["annotations"][c.TEMPLATE_DIGEST_ANNOTATION] = "another plan"
    world.api.seed(kinds.POD_TEMPLATE, again)
    world.api.remove(kinds.PROVISIONING_REQUEST, "train-fitgate-1", "default")
    await world.reconcile()
    assert [call.name for call in world.api.verbs("delete", kinds.POD_TEMPLATE)] == [name]
    replaced = world.api.find(kinds.POD_TEMPLATE, name, "default")
    assert replaced is not None and "restartPolicy" not in replaced["template"]["spec"]
