"""The project's fake of its own client wrapper behaves as the API does where fitgate relies
on it: resourceVersions, watch replay and Gone, conflicts, apply merging by name, RBAC."""

from __future__ import annotations

import asyncio

import pytest

from admission.kube import client, errors, fake, kinds, rbac


def _wl(name: str, ns: str = "team-a") -> dict:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"queueName": "q"}}


async def test_create_get_conflict_and_delete() -> None:
    c = fake.FakeClient()
    made = await c.create(kinds.PROVISIONING_REQUEST, _wl("w"))
    assert made["metadata"]["resourceVersion"] == "1"
    with pytest.raises(errors.AlreadyExists):
        await c.create(kinds.PROVISIONING_REQUEST, _wl("w"))
    c.seed(kinds.JOB, _wl("j"))
    stale = {"metadata": {"resourceVersion": "0"}, "spec": {"suspend": False}}
    with pytest.raises(errors.Conflict):
        await c.patch(kinds.JOB, "j", stale, namespace="team-a")
    await c.delete(kinds.PROVISIONING_REQUEST, "w", "team-a")
    with pytest.raises(errors.NotFound):
        await c.get(kinds.PROVISIONING_REQUEST, "w", "team-a")


async def test_watch_replays_after_resource_version_and_gone_after_compaction() -> None:
    c = fake.FakeClient()
    c.seed(kinds.WORKLOAD, _wl("a"))
    listing = await c.list(kinds.WORKLOAD)
    c.seed(kinds.WORKLOAD, _wl("b"))
    seen = []
    async for ev in c.watch(kinds.WORKLOAD, listing.resource_version):
        seen.append((ev.type, ev.object["metadata"]["name"]))
        c.close_watches()
    assert seen == [("ADDED", "b")]
    c.compact()
    with pytest.raises(errors.Gone):
        async for _ in c.watch(kinds.WORKLOAD, listing.resource_version):
            pass


async def test_live_watch_sees_later_writes() -> None:
    c = fake.FakeClient()
    got: list[str] = []

    async def consume() -> None:
        async for ev in c.watch(kinds.NODE, "0"):
            got.append(ev.type)
            if len(got) == 2:
                return

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)
    c.seed(kinds.NODE, {"metadata": {"name": "n"}})
    c.seed(kinds.NODE, {"metadata": {"name": "n"}, "spec": {"unschedulable": True}})
    await asyncio.wait_for(task, 1)
    assert got == ["ADDED", "MODIFIED"]


async def test_apply_status_merges_admission_checks_by_name() -> None:
    c = fake.FakeClient()
    wl = _wl("w")
    wl["status"] = {"admissionChecks": [{"name": "kueue-check", "state": "Pending"},
                                        {"name": "fitgate", "state": "Pending"}]}
    c.seed(kinds.WORKLOAD, wl)
    out = await c.apply(kinds.WORKLOAD, {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "w", "namespace": "team-a"},
        "status": {"admissionChecks": [{"name": "fitgate", "state": "Ready"}]}},
        field_manager="fitgate", subresource="status")
    assert out["status"]["admissionChecks"] == [{"name": "kueue-check", "state": "Pending"},
                                                {"name": "fitgate", "state": "Ready"}]


async def test_undeclared_calls_are_refused_like_rbac_would() -> None:
    c = fake.FakeClient()
    with pytest.raises(rbac.Undeclared, match="delete core/nodes"):
        await c.delete(kinds.NODE, "n")


async def test_injected_outage_fails_then_recovers() -> None:
    c = fake.FakeClient()
    c.fail_next(errors.ApiError(0, "Unavailable", "connection refused"), verb="list")
    with pytest.raises(errors.ApiError):
        await c.list(kinds.NODE)
    assert (await c.list(kinds.NODE)).items == []


def test_cluster_role_grants_exactly_the_declared_calls() -> None:
    role = rbac.cluster_role()
    granted = {(g, r, v) for rule in role["rules"]  # type: ignore[union-attr]
               for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    declared = {(k.group, k.plural + (f"/{s}" if s else ""), v)
                for (k, s), verbs in rbac.PERMISSIONS.items() for v in verbs}
    assert granted == declared
    assert ("coordination.k8s.io", "leases", "update") in granted
    assert ("kueue.x-k8s.io", "admissionchecks/status", "patch") in granted


@pytest.mark.parametrize(("status", "body", "expected"), [
    (404, {"reason": "NotFound", "message": "leases \"x\" not found"}, errors.NotFound),
    (409, {"reason": "AlreadyExists", "message": "exists"}, errors.AlreadyExists),
    (409, {"reason": "Conflict", "message": "modified"}, errors.Conflict),
    (410, {"reason": "Expired", "message": "too old resource version"}, errors.Gone),
    (500, "internal error", errors.ApiError),
], ids=["not-found", "already-exists", "conflict", "gone", "text-body"])
def test_api_errors_map_to_the_error_family(status: int, body: object,
                                            expected: type[errors.ApiError]) -> None:
    err = client.error_of(status, body, "GET /x")
    assert type(err) is expected
    assert err.status == status
    assert err.message


def test_rest_paths() -> None:
    assert client.path(kinds.NODE) == "/api/v1/nodes"
    assert client.path(kinds.POD, "ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert client.path(kinds.WORKLOAD, "ns", "w", "status") == \
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/w/status"
    assert client.path(kinds.ADMISSION_CHECK, None, "c") == \
        "/apis/kueue.x-k8s.io/v1beta2/admissionchecks/c"
