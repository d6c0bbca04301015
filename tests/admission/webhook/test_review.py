"""The webhook core (`review.Hooks`), without HTTP: which jobs get the gate, what the
validating hook says about gangs that can never fit, pod gates, and availability first."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from typing import Any

import pytest

from admission import constants
from admission.engine import fitting
from admission.gate import predicates as gating
from admission.kube import kinds
from admission.webhook import models, review
from fitcore import gang, plan
from tests.admission import builders as ab
from tests.gang import builders as gb

#: Tests of what a verdict says wait for it (the default decision budget is 10 ms, which a
#: loaded test machine may miss); the budget's own behaviour has its tests below.
PATIENT = review.Config(decision_budget_seconds=30)


def hooks(*objects: Any, config: review.Config | None = None) -> review.Hooks:
    stores = ab.stores(*objects)
    return review.Hooks(stores, fitting.StoreEngine(stores, idle=True),
                        config=config or PATIENT)


def validations(outcome: str) -> float:
    import prometheus_client

    return prometheus_client.REGISTRY.get_sample_value(
        "fitgate_webhook_validations_total", {"outcome": outcome}) or 0.0


def request(obj: dict[str, Any] | None, **kw: Any) -> models.AdmissionRequest:
    return models.AdmissionReview.model_validate(ab.review(obj, **kw)).request


def patched(response: models.AdmissionResponse, obj: dict[str, Any]) -> dict[str, Any]:
    """Apply the response's patch as the API server does (through the wire format)."""
    from admission.kube import fake

    wire = response.review()["response"]
    if "patch" not in wire:
        return obj
    assert wire["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(wire["patch"]))
    return fake.json_patch(obj, ops)


# ------------------------------------------------------------------------ mutate-jobs

GATED = gating.GATED_BY

MUTATE_CASES = [
    ("no annotations", None, "fitgate.io/topology-fit"),
    ("other entries kept", "example.com/a, example.com/b",
     "example.com/a,example.com/b,fitgate.io/topology-fit"),
    ("already gated", "fitgate.io/topology-fit", None),
    ("already gated among others", "example.com/a,fitgate.io/topology-fit", None),
]


@pytest.mark.parametrize(("before", "after"), [c[1:] for c in MUTATE_CASES],
                         ids=[c[0] for c in MUTATE_CASES])
async def test_mutate_adds_our_gate_and_keeps_the_others(before: str | None,
                                                         after: str | None) -> None:
    h = hooks(ab.queued("topo-fit"))
    job = ab.job(annotations={GATED: before, "team": "a"} if before else None)
    response = await h.review("mutate-jobs", request(job))
    assert response.allowed
    out = patched(response, job)
    if after is None:
        assert response.patch == []
        assert out == job
    else:
        assert out["metadata"]["annotations"][GATED] == after
        # Nothing else in the Job changes.
        rest = {k: v for k, v in out["metadata"]["annotations"].items() if k != GATED}
        assert rest == ({"team": "a"} if before else {})
        assert {k: v for k, v in out.items() if k != "metadata"} == \
            {k: v for k, v in job.items() if k != "metadata"}


NOT_OURS = [
    ("queue without our check", [ab.namespace(), ab.local_queue(), ab.cluster_queue("gpu"),
                                 ab.admission_check()], ab.job(), "CREATE", "Job"),
    ("another controller's check", [ab.namespace(), ab.local_queue(),
                                    ab.cluster_queue("gpu", "prov"),
                                    ab.admission_check("prov", "kueue.x-k8s.io/prov")],
     ab.job(), "CREATE", "Job"),
    ("no queue label", ab.queued("topo-fit"), ab.job(queue=None), "CREATE", "Job"),
    ("unknown LocalQueue", ab.queued("topo-fit"), ab.job(queue="nope"), "CREATE", "Job"),
    ("update", ab.queued("topo-fit"), ab.job(), "UPDATE", "Job"),
    ("not a job kind", ab.queued("topo-fit"), ab.job(), "CREATE", "CronJob"),
]


@pytest.mark.parametrize(("objects", "job", "operation", "kind"), [c[1:] for c in NOT_OURS],
                         ids=[c[0] for c in NOT_OURS])
async def test_mutate_leaves_jobs_alone_that_our_check_does_not_guard(
        objects: list[dict[str, Any]], job: dict[str, Any], operation: str, kind: str) -> None:
    h = hooks(objects)
    response = await h.review("mutate-jobs", request(job, operation=operation, kind=kind))
    assert response.allowed and response.patch == [] and response.warnings == []


async def test_mutate_reads_v1beta1_cluster_queues_and_other_job_kinds() -> None:
    h = hooks([ab.namespace(), ab.local_queue(), ab.cluster_queue("gpu", "topo-fit",
                                                                  v1beta1=True),
               ab.admission_check()])
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "js", "namespace": ab.NS,
                           "labels": {gating.QUEUE_LABEL: "q"}}, "spec": {}}
    response = await h.review("mutate-jobs", request(
        jobset, group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
        resource="jobsets"))
    assert patched(response, jobset)["metadata"]["annotations"] == {GATED: gating.GATE}


async def test_job_kinds_are_configurable_by_gvk() -> None:
    only_rayjob = review.Config(decision_budget_seconds=30,
                                job_kinds=(gating.job_kind("ray.io/v1/RayJob"),))
    h = hooks(ab.queued("topo-fit"), config=only_rayjob)
    assert (await h.review("mutate-jobs", request(ab.job()))).patch == []
    ray = {"metadata": {"name": "r", "namespace": ab.NS, "labels": {gating.QUEUE_LABEL: "q"}}}
    response = await h.review("mutate-jobs", request(ray, group="ray.io", kind="RayJob",
                                                     resource="rayjobs"))
    assert response.patch != []
    with pytest.raises(ValueError, match="group/version/Kind"):
        gating.job_kind("RayJob")
    with pytest.raises(ValueError, match="declares no API calls"):
        gating.job_kind("example.com/v1/MyJob")


def test_remove_gate_patch_removes_only_ours() -> None:
    from admission.kube import fake

    job = ab.job(annotations={GATED: "example.com/a,fitgate.io/topology-fit"})
    out = fake.json_patch(job, gating.remove_gate_patch(job))
    assert out["metadata"]["annotations"][GATED] == "example.com/a"
    alone = ab.job(annotations={GATED: "fitgate.io/topology-fit", "x": "y"})
    out = fake.json_patch(alone, gating.remove_gate_patch(alone))
    assert out["metadata"]["annotations"] == {"x": "y"}
    assert gating.remove_gate_patch(out) == []


# ------------------------------------------------------------------------ mutate-pods


async def test_pods_with_the_placement_label_get_the_scheduling_gate() -> None:
    h = hooks()
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": ab.NS,
                        "labels": {constants.PLACEMENT_LABEL: "wl-1"}},
           "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/topology"}],
                    "containers": [{"name": "c"}]}}
    kw = {"group": "", "kind": "Pod", "resource": "pods"}
    response = await h.review("mutate-pods", request(pod, **kw))
    assert patched(response, pod)["spec"]["schedulingGates"] == [
        {"name": "kueue.x-k8s.io/topology"}, {"name": constants.SCHEDULING_GATE}]
    unlabelled = {**pod, "metadata": {"name": "p", "namespace": ab.NS}}
    assert (await h.review("mutate-pods", request(unlabelled, **kw))).patch == []
    bare = {**pod, "spec": {"containers": []}}
    assert patched(await h.review("mutate-pods", request(bare, **kw)), bare)["spec"][
        "schedulingGates"] == [{"name": constants.SCHEDULING_GATE}]
    bound = {**bare, "spec": {"nodeName": "gpu-0", "containers": []}}
    assert (await h.review("mutate-pods", request(bound, **kw))).patch == []


# ---------------------------------------------------------------------- validate-jobs


def guarded(*more: Any) -> list[Any]:
    return [ab.queued("topo-fit"), ab.cluster(2), *more]


async def test_a_gang_that_fits_is_allowed_without_warnings() -> None:
    h = hooks(guarded(gb.template("gpus", gpus=4, namespace=ab.NS)))
    response = await h.review("validate-jobs", request(ab.job(parallelism=4)))
    assert response.allowed and response.warnings == []


async def test_a_gang_no_node_or_shape_can_host_is_warned_naming_what_is_missing() -> None:
    h = hooks(guarded(gb.template("gpus", gpus=6, namespace=ab.NS), gb.shape("h100-rail")))
    response = await h.review("validate-jobs", request(ab.job()))
    assert response.allowed
    text = "\n".join(response.warnings)
    assert "Job team-a/train can never be admitted to ClusterQueue gpu" in text
    assert "pod set main" in text  # the pod set
    assert "ResourceClaim team-a/gpus" in text  # the claim
    assert "matchAttribute resource.kubernetes.io/pcieRoot" in text  # the constraint
    assert "largest group of usable devices has 5" in text  # the most any node offers
    assert "shape h100-rail" in text  # and what the shape offers


async def test_deny_enforcement_refuses_with_the_same_reasons() -> None:
    deny = ab.fit_policy("strict", enforcement="deny")
    h = hooks(guarded(gb.template("gpus", gpus=6, namespace=ab.NS), deny))
    response = await h.review("validate-jobs", request(ab.job()))
    assert not response.allowed
    assert response.status is not None and response.status.code == 403
    assert "largest group of usable devices has 5" in response.status.message


def busy(node: str) -> dict[str, Any]:
    """Every GPU and NIC of a node taken by another tenant's claim."""
    from tests.fitcore import builders as b

    claim = gb.allocated(f"busy-{node}", node, [(b.GPU, f"gpu-{i}") for i in range(8)]
                         + [(b.NIC, "nic-0"), (b.NIC, "nic-1")])
    claim["metadata"]["namespace"] = "other"
    return claim


async def test_a_busy_cluster_is_not_a_gang_that_can_never_fit() -> None:
    objects = guarded(gb.template("gpus", gpus=4, namespace=ab.NS), busy("gpu-0"),
                      busy("gpu-1"))
    # The hooks ask about the idle cluster: every GPU in use is the check's concern.
    response = await hooks(objects).review("validate-jobs", request(ab.job()))
    assert response.allowed and response.warnings == []
    # The same question on the busy cluster would read as "no node can host it".
    stores = ab.stores(objects)
    on_busy = review.Hooks(stores, fitting.StoreEngine(stores), config=PATIENT)
    response = await on_busy.review("validate-jobs", request(ab.job()))
    assert any("can never be admitted" in w for w in response.warnings)


async def test_a_gang_only_a_shape_can_host_is_allowed() -> None:
    h = hooks(guarded(gb.template("gpus", gpus=6, namespace=ab.NS),
                      gb.shape("one-root", gpus=8, roots=1)))
    response = await h.review("validate-jobs", request(ab.job()))
    assert response.allowed and response.warnings == []


async def test_a_policy_that_forbids_the_only_shape_is_reported_as_a_violation() -> None:
    policy = ab.fit_policy("team-a", subjects={"namespaces": [ab.NS]},
                           nodeShapes={"names": ["h100-rail"]}, enforcement="deny")
    h = hooks(guarded(gb.template("gpus", gpus=6, namespace=ab.NS),
                      gb.shape("one-root", gpus=8, roots=1), gb.shape("h100-rail"), policy))
    response = await h.review("validate-jobs", request(ab.job()))
    assert not response.allowed and response.status is not None
    assert "its FitPolicy forbids every node and shape" in response.status.message
    assert "FitPolicy team-a" in response.status.message


async def test_a_job_the_engine_cannot_read_is_allowed_with_a_warning() -> None:
    h = hooks(guarded())  # the Job names a ResourceClaimTemplate that does not exist
    response = await h.review("validate-jobs", request(ab.job()))
    assert response.allowed
    assert any("cannot read Job team-a/train" in w and "gpus not found" in w
               for w in response.warnings)
    broken = ab.job()
    broken["spec"]["parallelism"] = "many"
    response = await h.review("validate-jobs", request(broken))
    assert response.allowed and "spec.parallelism" in response.warnings[0]


async def test_jobs_our_check_does_not_guard_are_not_evaluated() -> None:
    class Boom:
        def plan(self, *_: Any, **__: Any) -> plan.PlanResult:
            raise AssertionError("must not be called")

    stores = ab.stores([ab.namespace(), ab.local_queue(), ab.cluster_queue("gpu")])
    h = review.Hooks(stores, Boom())
    assert (await h.review("validate-jobs", request(ab.job()))).allowed


class Slow:
    """An engine that decides only once released (counting its calls): a verdict that
    the gang can never fit."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def plan(self, *_: Any, **__: Any) -> plan.PlanResult:
        self.calls += 1
        self.release.wait(10)
        return plan.PlanResult("unsatisfiable", category="configuration",
                               reasons=("pod set main: no node offers 4 GPUs on one root",))


async def test_a_slow_decision_is_allowed_unchecked_and_then_answered_from_the_cache() -> None:
    engine = Slow()
    stores = ab.stores(guarded(gb.template("gpus", gpus=4, namespace=ab.NS)))
    h = review.Hooks(stores, engine, config=review.Config(decision_budget_seconds=0.05))
    deferred = validations("deferred")
    try:
        response = await h.review("validate-jobs", request(ab.job("first")))
        # Answered while the engine still decides (it waits for `release`): allowed,
        # nothing said to the user, the audit annotation and the metric say why.
        assert not engine.release.is_set()
        assert response.allowed and response.warnings == []
        audit = response.review()["response"]["auditAnnotations"][review.AUDIT_KEY]
        assert audit.startswith("not checked within the webhook's 50 ms")
        assert validations("deferred") == deferred + 1
        # The loop stayed free: a mutation is answered while the engine is still busy.
        assert (await h.review("mutate-jobs", request(ab.job()))).patch != []
        # The decision finishes off the request path; the same spec is then answered from
        # the cache with the verdict, without deciding again.
        engine.release.set()
        for _ in range(200):
            if not h._inflight:
                break
            await asyncio.sleep(0.01)
        again = await h.review("validate-jobs", request(ab.job("second")))
        assert any("job team-a/second can never be admitted" in w.lower()
                   for w in again.warnings)
        assert again.audit == {review.AUDIT_KEY: "cached"}
        assert engine.calls == 1
    finally:
        engine.release.set()
        h.close()


async def test_a_decision_within_the_budget_is_answered_at_once() -> None:
    h = hooks(guarded(gb.template("gpus", gpus=6, namespace=ab.NS)))
    response = await h.review("validate-jobs", request(ab.job()))
    assert response.audit == {review.AUDIT_KEY: "decided"}
    assert any("can never be admitted" in w for w in response.warnings)


async def test_an_engine_bug_is_an_allowed_response_not_an_error() -> None:
    class Broken:
        def plan(self, *_: Any, **__: Any) -> plan.PlanResult:
            raise RuntimeError("bug")

    stores = ab.stores(guarded(gb.template("gpus", gpus=4, namespace=ab.NS)))
    h = review.Hooks(stores, Broken(), config=PATIENT)
    response = await h.review("validate-jobs", request(ab.job()))
    assert response.allowed and "RuntimeError" in response.warnings[0]


async def test_identical_questions_share_one_decision_until_the_cluster_changes() -> None:
    calls = []
    stores = ab.stores(guarded(gb.template("gpus", gpus=4, namespace=ab.NS)))
    engine = fitting.StoreEngine(stores)

    class Counting:
        def plan(self, g: gang.Gang, **kw: Any) -> plan.PlanResult:
            calls.append(g.name)
            return engine.plan(g, **kw)

    h = review.Hooks(stores, Counting(), config=PATIENT)
    for i in range(3):
        job = ab.job(f"train-{i}")
        assert (await h.review("validate-jobs", request(job))).allowed
    assert len(calls) == 1
    stores[kinds.NODE].seed(gb.node("cpu-0"))
    await h.review("validate-jobs", request(ab.job("train-3")))
    assert len(calls) == 2
    # A Node's heartbeat (its status conditions) changes nothing a decision reads.
    beat = {**gb.node("cpu-0"), "status": {**gb.node("cpu-0")["status"], "conditions": [
        {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-03T08:00:00Z"}]}}
    stores[kinds.NODE].seed(beat)
    await h.review("validate-jobs", request(ab.job("train-4")))
    assert len(calls) == 2


async def test_a_backlog_of_decisions_is_not_queued_behind() -> None:
    engine = Slow()
    stores = ab.stores(guarded(gb.template("gpus", gpus=4, namespace=ab.NS)))
    h = review.Hooks(stores, engine, config=review.Config(max_pending=1,
                                                          decision_budget_seconds=0.05))
    skipped = validations("skipped")
    try:
        first = await h.review("validate-jobs", request(ab.job(parallelism=1)))
        assert first.audit[review.AUDIT_KEY].startswith("not checked within")
        # One decision is running; a different spec is not queued behind it.
        second = await h.review("validate-jobs", request(ab.job(parallelism=2)))
        assert second.allowed and second.warnings == []
        assert second.audit == {review.AUDIT_KEY: (
            "not checked: the queue of decisions is full (1); the AdmissionCheck decides")}
        assert validations("skipped") == skipped + 1
        assert engine.calls <= 1 and len(h._inflight) == 1
    finally:
        engine.release.set()
        h.close()
