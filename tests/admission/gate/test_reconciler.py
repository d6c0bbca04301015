"""The gate controller: removes only its own entry from the owning Job when the gang can
fit, holds it with an explanation and events when it cannot, and looks again when the
inventory or the policies change."""

from __future__ import annotations

import datetime
import json
from typing import Any

from admission import clock
from admission.engine import fitting
from admission.gate import predicates as gating
from admission.gate import reconciler as gate
from admission.kube import client, errors, fake, kinds
from tests.admission import builders as ab
from tests.gang import builders as gb

GATED = gating.GATED_BY
NOW = datetime.datetime(2026, 12, 3, 8, 0, tzinfo=datetime.UTC)


class World:
    """A FakeClient holding the Job, stores holding everything the gate reads."""

    def __init__(self, *objects: Any, gated: str = gating.GATE,
                 template_gpus: int = 4) -> None:
        self.job = ab.job(annotations={GATED: gated})
        self.api = fake.FakeClient()
        self.api.seed(kinds.JOB, self.job)
        self.workload = ab.workload_of(self.job)
        self.stores = ab.stores(ab.queued("topo-fit"), ab.cluster(2),
                                gb.template("gpus", gpus=template_gpus, namespace=ab.NS),
                                self.workload, *objects)
        self.gate = gate.GateController(self.api, self.stores,
                                        fitting.StoreEngine(self.stores, idle=True),
                                        clock=clock.FakeClock(NOW))
        self.key = f"{ab.NS}/{self.workload['metadata']['name']}"
        self.enqueued: list[str] = []
        for kind in self.gate.watches:  # as the reconcile runtime does
            self.stores[kind].subscribe(self._offer(kind))

    def _offer(self, kind: kinds.Kind) -> Any:
        def on_event(event: client.WatchEvent, before: client.Obj | None) -> None:
            self.enqueued.extend(self.gate.keys(kind, event, before))
        return on_event

    def job_annotations(self) -> dict[str, str]:
        job = self.api.find(kinds.JOB, "train", ab.NS)
        assert job is not None
        return dict(job["metadata"].get("annotations") or {})

    def events(self) -> list[dict[str, Any]]:
        return self.api.objects(kinds.EVENT)

    async def reconcile(self) -> float | None:
        return await self.gate.reconcile(self.key)


async def test_a_gang_that_fits_is_ungated_removing_only_our_entry() -> None:
    w = World(gated="example.com/other,fitgate.io/topology-fit")
    assert await w.reconcile() is None
    assert w.job_annotations() == {GATED: "example.com/other"}
    [event] = w.events()
    assert event["reason"] == "GateCleared" and event["regarding"]["kind"] == "Workload"
    patches = w.api.verbs("patch", kinds.JOB)
    assert len(patches) == 1 and patches[0].body[0]["op"] == "test"


async def test_a_gang_only_new_nodes_make_fit_is_ungated_too() -> None:
    w = World(gb.shape("one-root", gpus=8, roots=1), template_gpus=6)
    assert await w.reconcile() is None
    assert GATED not in w.job_annotations()


async def test_a_gang_that_can_never_fit_stays_gated_with_an_explanation_and_events() -> None:
    w = World(gb.shape("h100-rail"), template_gpus=6)
    assert await w.reconcile() is None  # configuration: wait for a change, not a timer
    ann = w.job_annotations()
    assert ann[GATED] == gating.GATE
    explained = json.loads(ann[gating.EXPLANATION])
    assert explained["verdict"] == "unsatisfiable"
    assert explained["category"] == "configuration"
    assert explained["policyViolation"] is False
    assert any("largest group of usable devices has 5" in r for r in explained["reasons"])
    assert explained["evaluatedAt"] == "2026-12-03T08:00:00Z"
    assert {(e["regarding"]["kind"], e["reason"], e["type"]) for e in w.events()} == {
        ("Workload", "GateHeld", "Warning"), ("Job", "GateHeld", "Warning")}
    # The same verdict again writes nothing and records no more events.
    patches = len(w.api.verbs("patch"))
    assert await w.reconcile() is None
    assert len(w.api.verbs("patch")) == patches and len(w.events()) == 2


async def test_a_held_gang_is_ungated_when_a_shape_that_fits_appears() -> None:
    w = World(template_gpus=6)
    await w.reconcile()
    assert w.job_annotations()[GATED] == gating.GATE
    w.enqueued.clear()
    node = w.stores[kinds.NODE].get("gpu-0")
    assert node is not None
    w.stores[kinds.NODE].seed({**node, "status": {**node["status"], "conditions": [
        {"type": "Ready", "status": "True"}]}})
    assert w.enqueued == []  # a heartbeat changes nothing
    w.stores[kinds.NODE_SHAPE].seed(gb.shape("one-root", gpus=8, roots=1))
    assert w.enqueued == [w.key]  # the inventory changed: look again
    await w.reconcile()
    ann = w.job_annotations()
    assert GATED not in ann and gating.EXPLANATION not in ann


async def test_a_policy_forbidding_the_only_shape_holds_the_gang_as_a_violation() -> None:
    forbid = ab.fit_policy("team-a", subjects={"namespaces": [ab.NS]},
                           nodeShapes={"names": ["h100-rail"]})
    w = World(gb.shape("one-root", gpus=8, roots=1), gb.shape("h100-rail"), forbid,
              template_gpus=6)
    await w.reconcile()
    explained = json.loads(w.job_annotations()[gating.EXPLANATION])
    assert explained["policyViolation"] is True
    assert explained["policies"] == ["team-a"]
    assert "shapes h100-rail" in explained["allowed"]
    w.enqueued.clear()
    w.stores[kinds.FIT_POLICY].apply(client.WatchEvent("DELETED", forbid))
    assert w.enqueued == [w.key]
    await w.reconcile()
    assert GATED not in w.job_annotations()


async def test_a_gang_held_for_capacity_is_checked_again_later() -> None:
    w = World(gb.shape("one-root", gpus=8, roots=1, max_nodes=0), template_gpus=6)
    # One-root nodes could host the pods, but the shape may not add any: capacity.
    assert await w.reconcile() == w.gate.config.capacity_recheck
    assert json.loads(w.job_annotations()[gating.EXPLANATION])["category"] == "capacity"


async def test_a_concurrent_change_of_the_annotation_is_retried_not_overwritten() -> None:
    w = World()
    w.api.fail_next(errors.ApiError(422, "Invalid", "test failed"), verb="patch",
                    kind=kinds.JOB)
    assert await w.reconcile() == w.gate.config.conflict_retry
    assert w.job_annotations()[GATED] == gating.GATE
    assert await w.reconcile() is None
    assert GATED not in w.job_annotations()


async def test_a_gang_the_engine_cannot_read_is_left_to_the_admission_check() -> None:
    w = World()
    w.stores[kinds.RESOURCE_CLAIM_TEMPLATE].apply(
        client.WatchEvent("DELETED", gb.template("gpus", namespace=ab.NS)))
    await w.reconcile()
    assert GATED not in w.job_annotations()
    [event] = w.events()
    assert "cannot read the gang" in event["note"] and "gpus not found" in event["note"]


async def test_workloads_not_gated_by_us_are_not_touched() -> None:
    w = World(gated="example.com/other")
    w.stores[kinds.WORKLOAD].seed({**w.workload, "metadata": {
        **w.workload["metadata"], "annotations": {GATED: "example.com/other"}}})
    assert await w.reconcile() is None
    assert w.api.calls == []
    assert w.enqueued == []


async def test_a_gang_is_ungated_on_a_busy_cluster_it_would_fit_idle() -> None:
    from tests.admission.webhook.test_review import busy

    w = World(busy("gpu-0"), busy("gpu-1"))
    assert await w.reconcile() is None
    assert GATED not in w.job_annotations()


async def test_a_gate_whose_queue_dropped_our_check_is_lifted() -> None:
    w = World(template_gpus=6)  # can never fit...
    w.stores[kinds.CLUSTER_QUEUE].seed(ab.cluster_queue("gpu"))  # ...but no longer ours
    await w.reconcile()
    assert GATED not in w.job_annotations()
    [event] = w.events()
    assert "no longer uses fitgate's AdmissionCheck" in event["note"]
