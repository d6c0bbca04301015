"""Fuzzing (hypothesis, bounded): malformed and hostile AdmissionReviews against the
webhook core (`server.answer`: parse, validate, review), and hostile Workloads and Jobs
against the reader `fitgate fit` uses (`fitcore.workload.load`) and the webhook's
(`fitting.gang_of`).

Every request gets an answer within the budget: 400 with a reason for what is not an
AdmissionReview, 200 with a response for the request's uid otherwise (never a 5xx, never
an exception). Every object is read, or refused with an error naming the field.

Examples per test are fixed (`EXAMPLES`), 10,500 in all; `make test` runs them in about
half a minute on the project's machine (see the README's figures).
"""

from __future__ import annotations

import asyncio
import json
import string
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fitcore
from admission.engine import fitting
from admission.gate import predicates as gating
from admission.kube import kinds
from admission.webhook import review, server
from fitcore import errors, workload
from tests.admission import builders as ab
from tests.gang import builders as gb

EXAMPLES = {"raw": 1500, "json": 2000, "review": 3000, "workload": 2500, "job": 1500}
def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
HOOKS = review.HOOKS

# ------------------------------------------------------------------ strategies

text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
               max_size=24)
names = st.sampled_from(["", "q", "train", "gpus", "main", "a" * 300, "ünï", "x/y", "-"])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), text, names)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(text, names), inner, max_size=4)),
    max_leaves=20)


def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The value, or something hostile in its place, or nothing."""
    return st.one_of(value, value, json_values, st.just(None))


quantities = st.one_of(st.sampled_from(["1", "8", "0", "-1", "1e400", "1Ki", "12.5m", "", "x",
                                        "9" * 40]), st.integers(-5, 2**64), json_values)
containers = st.lists(st.fixed_dictionaries({
    "name": maybe(names),
    "resources": maybe(st.fixed_dictionaries({"requests": maybe(st.dictionaries(
        st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu", ""]), quantities,
        max_size=3))}))}), max_size=3)
claims = st.lists(st.fixed_dictionaries({
    "name": maybe(names),
    "resourceClaimTemplateName": maybe(st.sampled_from(["gpus", "missing", ""])),
}, optional={"resourceClaimName": maybe(names)}), max_size=3)
pod_specs = st.fixed_dictionaries({"containers": maybe(containers)}, optional={
    "resourceClaims": maybe(claims),
    "nodeSelector": maybe(st.dictionaries(names, names, max_size=2)),
    "tolerations": maybe(st.lists(json_values, max_size=2)),
    "affinity": json_values,
    "initContainers": maybe(containers)})
templates = st.fixed_dictionaries({"spec": maybe(pod_specs)}, optional={
    "metadata": maybe(st.fixed_dictionaries({}, optional={"annotations": maybe(
        st.dictionaries(st.sampled_from(workload.REQUIRED_TOPOLOGY_ANNOTATIONS), names))}))})
counts = st.one_of(st.integers(-3, 40), st.just(2**63), json_values)
metadata = st.fixed_dictionaries({"name": maybe(names), "namespace": maybe(st.just(ab.NS))},
                                 optional={
    "labels": maybe(st.dictionaries(st.sampled_from([gating.QUEUE_LABEL, "x", ""]),
                                    maybe(st.sampled_from(["q", "nope", ""])), max_size=2)),
    "annotations": maybe(st.dictionaries(
        st.sampled_from([gating.GATED_BY, "x"]),
        maybe(st.sampled_from(["", ",", "a/b, ,fitgate.io/topology-fit", "fitgate.io/topology-fit",
                               "é" * 70])), max_size=2)),
    "ownerReferences": maybe(st.lists(json_values, max_size=2))})
jobs = st.fixed_dictionaries({
    "apiVersion": maybe(st.just("batch/v1")), "kind": st.just("Job"), "metadata": metadata,
    "spec": maybe(st.fixed_dictionaries({}, optional={
        "parallelism": counts, "completions": counts, "template": maybe(templates)}))})
pod_sets = st.lists(st.fixed_dictionaries({"template": maybe(templates)}, optional={
    "name": maybe(names), "count": counts, "minCount": counts,
    "topologyRequest": maybe(st.fixed_dictionaries({}, optional={"required": maybe(names)}))}),
    max_size=3)
workloads = st.fixed_dictionaries({
    "apiVersion": st.just("kueue.x-k8s.io/v1beta2"), "kind": st.just("Workload"),
    "metadata": metadata,
    "spec": maybe(st.fixed_dictionaries({}, optional={"podSets": maybe(pod_sets),
                                                      "queueName": maybe(names)})),
}, optional={"status": maybe(st.fixed_dictionaries({}, optional={"admission": maybe(
    st.fixed_dictionaries({}, optional={"podSetAssignments": maybe(st.lists(
        st.fixed_dictionaries({}, optional={"name": maybe(names), "count": counts}),
        max_size=2))}))}))})

job_kinds = st.sampled_from([("batch", "v1", "Job", "jobs"), ("", "v1", "Pod", "pods"),
                             ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
                             ("ray.io", "v1", "RayJob", "rayjobs"), ("", "v1", "", "")])
requests = st.builds(
    lambda gvk, op, obj, uid, ns, extra: {
        "uid": uid, "kind": {"group": gvk[0], "version": gvk[1], "kind": gvk[2]},
        "resource": {"group": gvk[0], "version": gvk[1], "resource": gvk[3]},
        "operation": op, "namespace": ns, "object": obj, **extra},
    job_kinds, st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]),
    st.one_of(jobs, workloads, st.dictionaries(text, json_values, max_size=3), st.none()),
    st.text(string.ascii_letters + string.digits + "-", min_size=1, max_size=40),
    st.sampled_from([ab.NS, "", "other"]),
    st.dictionaries(st.sampled_from(["oldObject", "dryRun", "userInfo", "name",
                                     "subResource"]), json_values, max_size=2))
reviews = st.one_of(
    st.builds(lambda r: {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "request": r}, requests),
    st.builds(lambda r, junk: {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "request": {**r, **junk}},
              requests, st.dictionaries(st.sampled_from(["uid", "kind", "operation",
                                                         "object", "resource"]),
                                        json_values, min_size=1, max_size=2)),
    st.dictionaries(st.sampled_from(["apiVersion", "kind", "request", "response"]),
                    json_values, max_size=4))


# ----------------------------------------------------------------- the webhook core


@pytest.fixture(scope="module")
def core() -> Iterator[tuple[asyncio.AbstractEventLoop, review.Hooks]]:
    stores = ab.stores(ab.queued("topo-fit"), ab.cluster(2),
                       gb.template("gpus", gpus=4, namespace=ab.NS), gb.shape("h100-rail"),
                       ab.fit_policy("p", subjects={"namespaces": ["other"]},
                                     enforcement="deny"),
                       ab.local_queue("q", "gpu", ns="other"))
    hooks = review.Hooks(stores, fitting.StoreEngine(stores),
                         config=review.Config(budget_seconds=1.0,
                                              decision_budget_seconds=1.0))
    loop = asyncio.new_event_loop()
    yield loop, hooks
    hooks.close()
    loop.close()


def answered(core: tuple[asyncio.AbstractEventLoop, review.Hooks], hook: review.Hook,
             raw: bytes) -> tuple[int, dict[str, Any]]:
    loop, hooks = core
    # A hang detector, not a timing assertion: the hooks' budget is 1 s.
    status, body = loop.run_until_complete(
        asyncio.wait_for(server.answer(hooks, hook, raw), timeout=30))
    assert status in (200, 400)
    json.dumps(body, allow_nan=False)  # the answer is JSON the API server can read
    if status == 400:
        assert body["code"] == 400 and body["message"]
    return status, body


def check_review(status: int, body: dict[str, Any], sent: Any) -> None:
    if status == 200:
        response = body["response"]
        assert response["uid"] == sent["request"]["uid"]
        assert isinstance(response["allowed"], bool)
        if not response["allowed"]:
            assert response["status"]["code"] == 403 and response["status"]["message"]


@fuzz(EXAMPLES["raw"])
@given(hook=st.sampled_from(HOOKS), raw=st.binary(max_size=256))
def test_raw_bytes(core: Any, hook: review.Hook, raw: bytes) -> None:
    answered(core, hook, raw)


@fuzz(EXAMPLES["json"])
@given(hook=st.sampled_from(HOOKS), value=json_values)
def test_any_json(core: Any, hook: review.Hook, value: Any) -> None:
    status, _ = answered(core, hook, json.dumps(value).encode())
    assert status == 400 or isinstance(value, dict)


@fuzz(EXAMPLES["review"])
@given(hook=st.sampled_from(HOOKS), sent=reviews)
def test_hostile_admission_reviews(core: Any, hook: review.Hook, sent: Any) -> None:
    status, body = answered(core, hook, json.dumps(sent).encode())
    check_review(status, body, sent)


# ---------------------------------------------------------------- the readers


_AROUND: list[workload.Document] = [(o, "fuzz.yaml") for o in [
    *gb.classes(), gb.template("gpus", gpus=4, namespace=ab.NS)]]
_STORES = ab.stores(gb.template("gpus", gpus=4, namespace=ab.NS))


def read_or_refuse(obj: dict[str, Any]) -> None:
    """`fitgate fit`'s reader and the webhook's: read, refuse naming the field, or (an
    apiVersion fitgate does not read, e.g. a Job that is not batch/v1) skip it and say so
    in the skipped note."""
    try:
        bundle = workload.load([*_AROUND, (obj, "fuzz.yaml")])
        assert len(bundle.gangs) == 1 or (
            not bundle.gangs and sum(bundle.skipped.values()) == 1
            and obj.get("apiVersion") not in ("batch/v1", "kueue.x-k8s.io/v1beta2")), bundle
    except errors.InputError as exc:
        assert exc.errors
        for e in exc.errors:
            assert e.message and e.source == "fuzz.yaml"
            assert e.obj.split(" ", 1)[0] in ("Workload", "Job", "object")
    try:
        fitting.gang_of(obj, _STORES)
    except fitcore.InputError as exc:
        assert str(exc)


@fuzz(EXAMPLES["workload"])
@given(obj=workloads)
def test_hostile_workloads(obj: dict[str, Any]) -> None:
    read_or_refuse(obj)


@fuzz(EXAMPLES["job"])
@given(obj=jobs)
def test_hostile_jobs(obj: dict[str, Any]) -> None:
    read_or_refuse(obj)


def test_at_least_ten_thousand_examples() -> None:
    assert sum(EXAMPLES.values()) >= 10_000
    assert set(HOOKS) == {"mutate-jobs", "validate-jobs", "mutate-pods"}
    assert kinds.JOB in gating.DEFAULT_JOB_KINDS
